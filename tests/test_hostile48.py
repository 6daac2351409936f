"""Holes hostile48 found, each reproduced for real: the real CLI in a subprocess (its peak
memory: one started for it; what a command says: a fork, `tests/forked_cli.py`), real
SQLite files (a bundle from `warm run`, edited with sqlite3 as an attacker would)."""

from __future__ import annotations

import sqlite3
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

from conftest import EXAMPLES, Warm
from test_hostile46 import _peak
from tune_rows import add_tunes, first_kernel_key


def _tunes_of_many_samples(source: Path, path: Path, tunes: int, samples: int) -> Path:
    """`source` with `tunes` more tunes of its first's operation (keyed as warm keys them),
    each of one measured candidate, its pick 'a', holding `samples` samples of 0.0: packed
    as format 2 packs them, deflated (500,000 samples: a row of ~7 KB inflating to 4 MB)."""
    kernel = first_kernel_key(source)
    # ok, timed, its kernel key whole; named 'a'; its median, its samples, no reason
    one = struct.pack("<BI", 3, 1) + b"a" + bytes.fromhex(kernel)
    one += struct.pack("<dI", 1e-4, samples)
    raw = struct.pack("<I", 1) + one + bytes(8 * samples) + struct.pack("<I", 0)
    return add_tunes(source, path, tunes, b"\1" + zlib.compress(raw, 9), "a")


def test_stats_holds_no_samples_of_the_tunes_it_lists(
    made: tuple[Warm, Path], tmp_path: Path, forked: Callable[[Warm], Warm]
) -> None:
    """A tune's packed candidates may inflate to 4 MiB of samples (500,000 of 0.0 from a row
    of ~7 KB). `warm stats` made each tune into what its tables show as it read it, but kept
    every sample of the candidates listed, which no table shows: 100 such tunes (a 737 KB
    bundle) took 2.0 GB (and `--explain` the same); 8 took ~160 MB more than the bundle
    without them. Now the listed candidates keep none (100 tunes: 100 MB)."""
    warm, good = made
    many = _tunes_of_many_samples(good, tmp_path / "many.warm", tunes=8, samples=500_000)
    flat = _peak(warm, "stats", good)
    grown = _peak(warm, "stats", many) - flat
    assert grown < 64 << 20, f"{grown >> 20} MiB more"
    shown = forked(warm)("stats", many, "--explain", "matmul")  # (its output: forked)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("100.0 µs") == 8, shown.stdout[-2000:]


MANY_SHAPES = """
import sys
sys.path.insert(0, {examples!r})
import numpy as np
from matmul_host import MATMUL

def workload(rt):
    rng = np.random.default_rng(0)
    for k in range(1, 21):
        a = rt.upload(rng.standard_normal((4, k), dtype=np.float32))
        b = rt.upload(rng.standard_normal((k, 4), dtype=np.float32))
        c = rt.buffer((4, 4))
        rt.tune(MATMUL, a, b, c, 4, 4, k)
"""
SERVE_PEAK = """
import runpy, sys, warmcli
runpy.run_path(sys.argv[1])["workload"](warmcli.runtime("host"))
done = warmcli.report()
hwm = next(ln for ln in open("/proc/self/status") if ln.startswith("VmHWM:"))
print(len(done.tunes), len(done.kernels), int(hwm.split()[1]) << 10)
"""


def _with_samples(path: Path, samples: int) -> None:
    """Each tune of the bundle at `path` with `samples` more samples of its pick, all equal to
    its median, packed as format 2 packs them (kernel keys whole), deflated: its key, pick and
    medians as they were (a row of ~7 KB each)."""
    conn = sqlite3.connect(path)
    with conn:
        ids = {i: bytes(k) for i, k in conn.execute("SELECT id, key FROM tune_kernels")}
        for key, pick in conn.execute("SELECT key, pick FROM tunes").fetchall():
            raw = bytearray(struct.pack("<I", 4))
            (doc,) = conn.execute("SELECT candidates FROM tunes WHERE key = ?", (key,)).fetchone()
            from warmcli.bundle.candidates import decode

            for c in decode(doc, lambda i: ids[i].hex()):
                extra = (c.seconds,) * samples if c.name == pick else ()
                times = c.samples + extra
                raw += struct.pack("<BI", 3, len(c.name)) + c.name.encode()
                raw += bytes.fromhex(c.kernel_key) + struct.pack("<dI", c.seconds, len(times))
                raw += struct.pack(f"<{len(times)}d", *times) + struct.pack("<I", 0)
            packed = b"\1" + zlib.compress(bytes(raw), 9)
            conn.execute("UPDATE tunes SET candidates = ? WHERE key = ?", (packed, key))
    conn.close()


def test_a_production_process_holds_no_samples_of_the_tunes_it_serves(
    warm: Warm, tmp_path: Path
) -> None:
    """A production process kept each tune it read from the bundle whole for its life, every
    sample of every candidate, though it serves a pick by its name alone: 40 tunes of 500,000
    samples each (a 639 KB bundle that `warm verify` calls sound) took a process serving
    them 37 MB -> 836 MB peak. Now it keeps each without samples (the row is read, checked,
    then let go of): 20 such tunes cost no more than one."""
    workload = tmp_path / "many.py"
    workload.write_text(MANY_SHAPES.format(examples=str(EXAMPLES)))
    bundle = tmp_path / "b.warm"
    done = warm("run", workload, "--bundle", bundle, "-q")
    assert done.returncode == 0, done.stderr
    _with_samples(bundle, 500_000)
    env = dict(warm.env, WARM_BUNDLE=str(bundle))
    served = subprocess.run(
        [sys.executable, "-c", SERVE_PEAK, str(workload)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert served.returncode == 0, served.stderr[-2000:]
    tunes, kernels, peak = map(int, served.stdout.split())
    assert (tunes, kernels) == (0, 0), served.stdout  # every tune served, none measured
    assert peak < 160 << 20, f"{peak >> 20} MiB peak"


def test_a_format1_tune_that_would_pack_past_the_bound_is_malformed(
    made: tuple[Warm, Path], tmp_path: Path, forked: Callable[[Warm], Warm]
) -> None:
    """A format-1 tune (candidates as JSON text) of 600,000 samples "0" is 1.2 MB of text,
    4.8 MB packed: `warm verify` called it sound, and `warm merge` of it with a good bundle
    wrote it packed, a row every reader refuses as inflating past 4 MiB (the merged bundle
    failed verify; a `warm clean` migrating the file removed it as corrupt). It is malformed
    as read now, as a packed row inflating past the bound is: the merge refuses its input."""
    from warmcli.bundle.file import APPLICATION_ID
    from warmcli.bundle.schema import SCHEMAS
    from warmcli.records import tune_key

    warm, good = made
    path = tmp_path / "one.warm"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(
        f"BEGIN; {SCHEMAS[1][0]} PRAGMA application_id = {APPLICATION_ID}; "
        "PRAGMA user_version = 1; COMMIT;"
    )
    manifest = [("format_version", "1"), ("warm_version", "1.0"), ("created", "1.0")]
    conn.executemany("INSERT INTO manifest VALUES (?, ?)", [*manifest, ("updated", "1.0")])
    samples = ",".join(["0"] * 600_000)
    doc = f'[{{"name": "a", "status": "ok", "seconds": 0, "samples": [{samples}]}}]'
    checksum = "c" * 64
    key = tune_key("op", "s", "dev", checksum)
    row = (key, "op", "s", "dev", checksum, "measured", "a", doc, 1.0, 1.0, 1.0)
    conn.execute("INSERT INTO tunes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", row)
    conn.close()
    verified = forked(warm)("verify", path)  # (their output: forked)
    assert verified.returncode == 1, verified.stdout
    assert f"corrupt tune entry '{key[:16]}'" in verified.stdout, verified.stdout
    assert "over 4194304 bytes packed" in verified.stdout, verified.stdout
    merged = forked(warm)("merge", path, good, "-o", tmp_path / "out.warm")
    assert merged.returncode == 2 and "Traceback" not in merged.stderr, merged.stderr
    assert len(merged.stderr.splitlines()) == 1 and "corrupt tune entry" in merged.stderr
    assert not (tmp_path / "out.warm").exists()


def test_stats_json_holds_the_lines_of_its_tunes_deflated(
    made: tuple[Warm, Path], tmp_path: Path, forked: Callable[[Warm], Warm]
) -> None:
    """`warm stats --json` of a bundle of up to 20,000 entries reads every tune before it
    writes (one snapshot), and held each tune's JSON line whole until then: 100 tunes of
    500,000 samples (a 737 KB bundle) took 378 MB, 300 tunes (1.6 MB) 937 MB. A long line
    is held deflated now, and inflated as it is written: the document is the same."""
    import hashlib

    warm, good = made
    few = _tunes_of_many_samples(good, tmp_path / "few.warm", tunes=2, samples=20_000)
    some = _tunes_of_many_samples(good, tmp_path / "some.warm", tunes=3, samples=500_000)
    many = _tunes_of_many_samples(good, tmp_path / "many.warm", tunes=20, samples=500_000)
    # (one such tune read costs ~70 MB while it is made into its line: once, not per tune)
    grown = _peak(warm, "stats", "--json", many) - _peak(warm, "stats", "--json", some)
    assert grown < 40 << 20, f"{grown >> 20} MiB more"  # (17 more lines held whole: 54 MiB)
    # The document of tunes with long lines is what their records say, line by line.
    shown = forked(warm)("stats", "--json", few)  # (its output: forked)
    assert shown.returncode == 0, shown.stderr
    from warmcli.bundle.store import Bundle
    from warmcli.cli.render.tune_line import tune_line

    with Bundle.open(few) as bundle:
        lines = {tune_line(t) for t in bundle.each_tune()}
    listed = [ln.strip().rstrip(",") for ln in shown.stdout.splitlines() if '"checksum"' in ln]
    assert len(listed) == 5 and set(listed) == lines
    digest = hashlib.sha256(shown.stdout.encode()).hexdigest()
    again = forked(warm)("stats", "--json", few).stdout
    assert digest == hashlib.sha256(again.encode()).hexdigest()
