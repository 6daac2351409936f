"""A synthetic bundle of 10,000 kernels and 100,000 tunes (rows `scale_*`, `*_scale`).

The bundle is written with warm's own schema (`Bundle.create`, then one
transaction of plain kernel inserts, much faster to build than 10,000 `put`s, and
one `put` of every tune, so tunes are stored in the bundle's own format): kernels
over two architectures with distinct random blobs (each behind a cubin's header of its
arch, as `warm verify` reads a cubin row), tunes over fifty operations
with four candidates each. `scale_open` is the time to open it and serve one
lookup (a kernel record, its blob checked against its sha256, a tune) against
its 50 ms budget, with the same lookup on a one-kernel bundle beside it.
`scale_stats` is the wall time of the real `warm stats` command on it, less that
of `warm --version` (the CLI's own start-up, not the bundle's doing), against
1 s. `bundle_size` is the file's size over the sum of its blobs' bytes, against 3×
(every sample of every tune kept), with where the bytes go (SQLite's `dbstat`, where
this SQLite has it). `stats_json_scale`
and `verify_scale` run `warm stats --json` and `warm verify` on it once each, a
whole process, against 3 s and 300 MB of peak memory (that process's own peak, started
through a small launcher: `bench.rows.python_peak`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import sqlite3
import struct
import tempfile
import time
from pathlib import Path

from bench.rows import (
    ROOT,
    Row,
    Size,
    at_most,
    best_of,
    launcher_floor,
    ms,
    python,
    python_peak,
)
from warmcli.bundle.store import Bundle
from warmcli.bundle.tune_layout import laid_tunes
from warmcli.bundle.tune_row import TUNE_ORDER, TUNE_SELECT
from warmcli.records import CandidateMeasurement, TuneRecord, tune_key

OPEN_BUDGET = 0.050
SIZE_RATIO = 3.0  # a bundle's file over its blobs' bytes
STATS_BUDGET = 1.0
BOUNDED_SECONDS = 3.0
BOUNDED_BYTES = 300e6
ARCHS = ("sm_80", "sm_90")
OPERATIONS = 50


def cubin_like(sm: int, payload: bytes) -> bytes:
    """A cubin's ELF header for `sm` (what `warm verify` reads of a cubin row's blob: a
    64-bit little-endian ELF, EM_CUDA, ELF ABI version 8, its SM in e_flags bits 8-15, one
    section header right after it, within the blob), then `payload` (at least 64 bytes)."""
    ident = b"\x7fELF\x02\x01\x01\x33\x08" + bytes(7)
    header = (ident, 2, 190, 1, 0, 0, 64, sm << 8, 64, 0, 0, 64, 1, 0)
    return struct.pack("<16sHHIQQQIHHHHHH", *header) + payload


def _key(*parts: object) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def build(path: Path, kernels: int, tunes: int, seed: int = 0) -> tuple[list[str], list[str], int]:
    """Write the synthetic bundle; (kernel keys, tune keys, sum of blob sizes)."""
    rng = random.Random(seed)
    kernel_rows, blob_rows = [], []
    for i in range(kernels):
        arch = ARCHS[i % len(ARCHS)]
        blob = cubin_like(int(arch[3:]), rng.randbytes(1024 + rng.randrange(2048) - 64))
        sha = hashlib.sha256(blob).hexdigest()
        blob_rows.append((sha, len(blob), blob))
        key, entry = _key("k", i), f"k{i % 97}"
        components = json.dumps({"arch": arch, "entry": entry})
        symbol = f"warm_{key[:16]}_{entry}"
        label = f"{entry}[V={i}]"
        kernel_rows.append(
            (
                key,
                arch,
                "cuda",
                arch,
                entry,
                label,
                symbol,
                sha,
                "nvcc:13",
                components,
                "",
                0.01,
                0,
                0,
            )
        )
    tune_records = []
    for i in range(tunes):
        op = f"op{i % OPERATIONS}"
        seconds = [1e-4 * (1 + rng.random()) for _ in range(4)]
        candidates = tuple(
            CandidateMeasurement(f"c{j}", _key("k", j), "ok", s, (s,) * 5)
            for j, s in enumerate(seconds)
        )
        pick = f"c{seconds.index(min(seconds))}"
        checksum = _key("checksum", op)
        shape, device = f"float32[{i}]", ARCHS[i % 2]
        key = tune_key(op, shape, device, checksum)  # the bundle checks a tune's key
        tune_records.append(
            TuneRecord(key, op, shape, device, checksum, "measured", pick, candidates, 0.01)
        )
    bundle = Bundle.create(path)
    try:
        with bundle.transaction() as conn:
            conn.executemany("INSERT INTO blobs VALUES (?, ?, ?)", blob_rows)
            conn.executemany(f"INSERT INTO kernels VALUES ({','.join('?' * 14)})", kernel_rows)
        bundle.put(tunes=tune_records)  # in the bundle's own format (keys as bytes, ids...)
    finally:
        bundle.close()
    return [r[0] for r in kernel_rows], [t.key for t in tune_records], sum(r[1] for r in blob_rows)


def open_and_lookup(path: Path, kernel_key: str, tune_key: str) -> None:
    """What a production process does first: open the bundle, serve one kernel and one pick."""
    with Bundle.open(path) as bundle:
        record = bundle.kernel(kernel_key)
        assert record is not None
        bundle.blob(record.sha256)
        assert bundle.tune(tune_key) is not None


def scale(size: Size) -> list[Row]:
    with tempfile.TemporaryDirectory(prefix="warm-bench-scale-") as tmp:
        big, small = Path(tmp, "big.warm"), Path(tmp, "small.warm")
        started = time.perf_counter()
        kernels, tunes, blob_bytes = build(big, size.scale_kernels, size.scale_tunes)
        built = time.perf_counter() - started
        small_k, small_t, _ = build(small, 1, 1, seed=1)
        mid_k, mid_t = kernels[len(kernels) // 2], tunes[len(tunes) // 2]
        repeats = max(3, size.repeats)
        opened = best_of(repeats, lambda: open_and_lookup(big, mid_k, mid_t))
        opened_small = best_of(repeats, lambda: open_and_lookup(small, small_k[0], small_t[0]))
        on_disk = big.stat().st_size
        where = _where_bytes_go(big)
        env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
        env["COLUMNS"] = "200"
        env["PYTHONPATH"] = str(ROOT)
        runs = [python("-m", "warmcli", "stats", str(big), env=env) for _ in range(3)]
        out, stats_s = min(runs, key=lambda r: r[1])
        version_s = min(python("-m", "warmcli", "--version", env=env)[1] for _ in range(3))
        stats_json = python_peak("-m", "warmcli", "stats", "--json", str(big), env=env)
        verify = python_peak("-m", "warmcli", "verify", str(big), env=env)
        floor = launcher_floor()
        reader = read_tunes(big)
    what = f"{len(kernels):,} kernels, {len(tunes):,} tunes (built in {built:.1f} s)"
    open_detail = (
        f"{what}: open + one kernel, its blob and one tune {ms(opened)} "
        f"(one-kernel bundle {ms(opened_small)})"
    )
    size_detail = (
        f"{what}: {on_disk / 2**20:.1f} MiB on disk for {blob_bytes / 2**20:.1f} MiB of "
        f"blobs, every sample kept{where}"
    )
    own = max(stats_s - version_s, 0.0)
    stats_detail = (
        f"{what}: `warm stats` {own:.2f} s beyond the CLI's own start-up "
        f"({stats_s:.2f} s wall, `warm --version` {version_s:.2f} s; best of 3 each), "
        f"{len(out.splitlines()):,} lines printed"
    )
    return [
        at_most("scale_open", opened / OPEN_BUDGET, 1.0, open_detail, "of 50 ms"),
        at_most("bundle_size", on_disk / blob_bytes, SIZE_RATIO, size_detail, "file / blobs"),
        at_most("scale_stats", own / STATS_BUDGET, 1.0, stats_detail, "of 1 s"),
        _bounded("stats_json_scale", "warm stats --json", what, stats_json, floor, reader),
        _bounded("verify_scale", "warm verify", what, verify, floor, reader),
    ]


def _where_bytes_go(path: Path) -> str:
    """ "; tables with their indexes: NAME X MiB, ..." from SQLite's `dbstat` ("" without it)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT coalesce(m.tbl_name, d.name), sum(d.pgsize) FROM dbstat AS d "
            "LEFT JOIN sqlite_master AS m ON m.name = d.name GROUP BY 1 ORDER BY 2 DESC LIMIT 4"
        ).fetchall()
    except sqlite3.Error:
        return ""
    finally:
        conn.close()
    return "; tables with their indexes: " + ", ".join(
        f"{name} {size / 2**20:.1f} MiB" for name, size in rows
    )


def read_tunes(path: Path) -> tuple[float, float]:
    """The CPU seconds this process takes to read and check every tune through the
    bundle's own reader (CPU time: what other processes on the machine do not change), and
    through the reader by layout both commands' workers use (`laid_tunes`: the same checks)."""
    started = time.process_time()
    with Bundle.open(path) as bundle:
        for _ in bundle.each_tune():
            pass
        parsed = time.process_time() - started
        listing = bundle._iter(f"{TUNE_SELECT} ORDER BY {TUNE_ORDER}")  # each_tune's rows
        for _ in laid_tunes(bundle, listing, None):
            pass
    return parsed, time.process_time() - started - parsed


def _bounded(
    name: str,
    command: str,
    what: str,
    run: tuple[int, float, int, float],
    floor: int,
    reader: tuple[float, float],
) -> Row:
    """A whole command on the big bundle against 3 s and 300 MB of peak memory: the ratio
    is the larger of the two fractions. The peak is that process's (or the largest it
    started), run through a launcher whose own size (`floor`) is the least it can read.
    What bounds it is said beside: its CPU time over all its processes and the CPUs here,
    and `reader`, the time one process takes to read and check every tune (the
    bundle's reader, and by layout, as both commands' workers read them), measured in this
    run. A command that does not exit 0 on it (a sound bundle) fails the row."""
    code, seconds, peak, cpu = run
    ratio = max(seconds / BOUNDED_SECONDS, peak / BOUNDED_BYTES)
    detail = (
        f"{what}: `{command}` {seconds:.2f} s wall (of {BOUNDED_SECONDS:g} s), peak memory "
        f"{peak / 1e6:.0f} MB (of {BOUNDED_BYTES / 1e6:.0f} MB; launcher floor "
        f"{floor / 1e6:.0f} MB), exit {code}; one run; {cpu:.2f} s CPU over its processes, "
        f"{len(os.sched_getaffinity(0))} CPUs here; reading and checking every tune through "
        f"the bundle's reader takes {reader[0]:.2f} s CPU in one process ({reader[1]:.2f} s "
        f"by layout, as the workers read them)"
    )
    row = at_most(name, ratio, 1.0, detail, "of 3 s and 300 MB")
    # the bundle is sound: a command that fails on it measured no success
    return row if code == 0 else dataclasses.replace(row, met=False)
