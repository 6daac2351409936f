"""Holes hostile40 found in what the last stop added, each reproduced for real: the CLI
forked (conftest's `warm`) on real SQLite bundles that an attacker edited (rows re-keyed as
a reader keys them, so they pass the row checks), NVRTC for `--arch sm_90` (no GPU).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (the fixture)
from test_leftovers39 import cuda_small, signed_small  # noqa: F401  (the fixtures)

from warmcli.kernel_parts import key_of


def _rearch(bundle: Path, arch: str) -> None:
    """One sm_90 row moved to `arch`, re-keyed (key, symbol, components) as a reader keys it."""
    with sqlite3.connect(bundle) as conn:
        rowid, comps, tool, entry = conn.execute(
            "SELECT rowid, components, toolchain, entry FROM kernels WHERE arch = 'sm_90' LIMIT 1"
        ).fetchone()
        parts = dict(json.loads(comps), arch=arch)
        key = key_of(parts["kernel"], arch, parts.get("headers", ""), tool)
        conn.execute(
            "UPDATE kernels SET key = ?, arch = ?, symbol = ?, components = ? WHERE rowid = ?",
            (key, arch, f"warm_{key[:16]}_{entry}", json.dumps(parts, sort_keys=True), rowid),
        )
    conn.close()


@pytest.mark.parametrize("arch", ["sm_\u00b2", "sm_\u2468\u2080"], ids=["superscript", "circled"])
def test_a_cubin_row_of_an_arch_of_non_decimal_digits_is_named_not_a_traceback(
    warm: Warm,
    tmp_path: Path,
    cuda_small: Path,  # noqa: F811
    arch: str,
) -> None:
    """check_cubin took an arch's SM with str.isdigit, which '²' passes and int() refuses: a
    bundle whose cubin row was re-keyed under arch 'sm_²' made `warm verify` and `warm clean`
    end in a ValueError traceback (exit 1). It is one named problem now."""
    bundle = tmp_path / "arch.warm"
    shutil.copyfile(cuda_small, bundle)
    _rearch(bundle, arch)
    before = hashlib.sha256(bundle.read_bytes()).hexdigest()
    verified = warm("verify", bundle)
    said = verified.stdout + verified.stderr
    assert verified.returncode == 1 and "Traceback" not in said, said[-1500:]
    assert "is not an sm_XX architecture" in said, said[-1500:]
    cleaned = warm("clean", "--dry-run", bundle)
    said = cleaned.stdout + cleaned.stderr
    assert cleaned.returncode == 0 and "Traceback" not in said, said[-1500:]
    assert "would remove 1 kernel(s)" in said, said[-1500:]
    assert hashlib.sha256(bundle.read_bytes()).hexdigest() == before


# `warm ARGS` run in a process of its own (a real CLI, its own Python), then the bytes it read
# and the rows its bundle's listings streamed (`RowReader._iter`: each kernel and tune listed).
_READ = """
import runpy, sys
from warmcli.bundle.rows import RowReader
streamed, rows = [0], RowReader._iter
def counted(self, *args, **kwargs):
    for row in rows(self, *args, **kwargs):
        streamed[0] += 1
        yield row
RowReader._iter = counted
sys.argv = ["warm", *sys.argv[1:]]
try:
    runpy.run_module("warmcli", run_name="__main__", alter_sys=True)
except SystemExit as exc:
    code = exc.code
with open("/proc/self/io") as io:
    read = next(int(line.split()[1]) for line in io if line.startswith("rchar:"))
print(f"warm-read {read} {streamed[0]} {code}", file=sys.stderr)
"""
MB = 1 << 20


class Done(NamedTuple):
    """What `_warm_read` saw of a command: its exit code, bytes read, rows listings streamed."""

    code: int
    read: int
    rows: int
    said: str


def _warm_read(warm: Warm, *args: object, **env: str) -> Done:
    """`warm ARGS` run in a process of its own (`env` added to its environment)."""
    env = dict(warm.env, PYTHONPATH=str(ROOT), **env)
    done = subprocess.run(
        [sys.executable, "-c", _READ, *map(str, args)],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    said, last = done.stderr.rsplit("warm-read ", 1)
    read, rows, code = last.split()
    return Done(int(code), int(read), int(rows), done.stdout + said)


def _named_by_many(bundle: Path, arch: str, rows: int, archs: object, pad: bytes) -> str:
    """`rows` kernel rows (their arch `archs(i)`, their kernel made up: key and symbol as a
    reader keys them) that all name one blob: the first `arch` row's blob padded to 8 MB."""
    with sqlite3.connect(bundle) as conn:
        row = list(conn.execute("SELECT * FROM kernels WHERE arch = ? LIMIT 1", (arch,)).fetchone())
        (data,) = conn.execute("SELECT data FROM blobs WHERE sha256 = ?", (row[7],)).fetchone()
        big = bytes(data) + pad * (8 * MB - len(data))
        sha = hashlib.sha256(big).hexdigest()
        conn.execute("INSERT INTO blobs VALUES (?, ?, ?)", (sha, len(big), big))
        parts, tool, entry = json.loads(row[9]), row[8], row[4]
        for i in range(rows):
            own = archs(i)  # type: ignore[operator]
            kernel = hashlib.sha256(f"made up {i}".encode()).hexdigest()
            made = dict(parts, arch=own, kernel=kernel)
            key = key_of(kernel, own, made.get("headers", ""), tool)
            cubin = key_of(kernel, "sm_90", made.get("headers", ""), tool)  # a PTX row's symbol
            cubin = cubin if own.startswith("compute_") else key
            values = [key, *row[1:3], own, entry, f"{row[5]}#{i}", f"warm_{cubin[:16]}_{entry}"]
            values += [sha, tool, json.dumps(made, sort_keys=True), *row[10:]]
            conn.execute(f"INSERT INTO kernels VALUES ({', '.join('?' * len(values))})", values)
    conn.close()
    return sha


def test_verify_hashes_a_blob_many_rows_name_once_not_once_a_row(
    tmp_path: Path,
    cuda_small: Path,  # noqa: F811
    warm: Warm,
) -> None:
    """`warm verify` and `warm clean` confirm a CUDA blob of the wrong kind by its sha256,
    read whole (`blobs.sound`), once per (blob, arch): rows of made-up archs all naming one
    blob had it hashed once a row, so the time grew with rows times the blob's size, not
    with the file's (a 256 MB blob named by 100,000 rows: hours). It is hashed once now."""
    bundle = tmp_path / "archs.warm"
    shutil.copyfile(cuda_small, bundle)
    rows = 24
    sha = _named_by_many(bundle, "sm_90", rows, lambda i: f"x{i}", b"\0")
    for command, code, named in (
        ("verify", 1, f"blob {sha[:16]}: 'x"),
        ("clean --dry-run", 0, f"would remove {rows} kernel(s)"),
    ):
        done, read, _, said = _warm_read(warm, *command.split(), bundle)
        assert done == code and "Traceback" not in said, said[-1500:]
        assert said.count(named) == (rows if command == "verify" else 1), said[-1500:]
        assert read < 6 * 8 * MB, (command, read // MB)  # it read 192 MB and more


def test_check_reads_a_ptx_blob_many_kernels_name_once(
    tmp_path: Path,
    cuda_small: Path,  # noqa: F811
    warm: Warm,
) -> None:
    """`warm check --arch sm_90` read and hashed a PTX row's blob again for each kernel it
    judged (its verdict was never kept, a cubin's is): kernels made up, each with only a
    PTX row naming one blob of PTX padded to 8 MB, were as many whole reads (100,000 of a
    64 MB blob: hours). One read a blob and device now, its verdict the same."""
    bundle = tmp_path / "ptx.warm"
    shutil.copyfile(cuda_small, bundle)
    _named_by_many(bundle, "compute_90", 24, lambda i: "compute_90", b" ")
    code, read, _, said = _warm_read(warm, "check", "--arch", "sm_90", bundle)
    assert code == 1 and "Traceback" not in said, said[-1500:]  # (its tunes pending)
    # its 8 kernels (a cubin and PTX each) and the 24 made up, each PTX only
    assert "32 kernel(s) in 40 build(s), 6 tune(s): 6 not servable here" in said, said[-1500:]
    assert read < 6 * 8 * MB, read // MB  # it read 192 MB and more


def _tunes_of_their_own(bundle: Path, n: int) -> None:
    """`n` kernels of the first row's entry (each its own, its label and content made up:
    key and symbol as a reader keys them, its blob the first row's) and `n` measured tunes
    (the first tune's, other shapes) whose candidates all name one of them each."""
    from warmcli.bundle import candidates
    from warmcli.records import tune_key

    with sqlite3.connect(bundle) as conn:
        row = list(conn.execute("SELECT * FROM kernels LIMIT 1").fetchone())
        parts, tool, entry = json.loads(row[9]), row[8], row[4]
        ids = dict(conn.execute("SELECT id, key FROM tune_kernels"))
        tune = list(conn.execute("SELECT * FROM tunes LIMIT 1").fetchone())
        picks = candidates.decode(tune[7], lambda i: bytes(ids[i]).hex())
        kernels, tunes = [], []
        for i in range(n):
            made = dict(parts, kernel=hashlib.sha256(f"made up {i}".encode()).hexdigest())
            key = key_of(made["kernel"], row[3], made.get("headers", ""), tool)
            symbol, text = f"warm_{key[:16]}_{entry}", json.dumps(made, sort_keys=True)
            label = f"{row[5]}#{i}"
            kernels.append([key, *row[1:4], entry, label, symbol, *row[7:9], text, *row[10:]])
            shape = f"{tune[2]} #{i}"
            named = candidates.pack(replace(c, kernel_key=key) for c in picks)
            tk = bytes.fromhex(tune_key(tune[1], shape, tune[3], tune[4].hex()))
            tunes.append([tk, tune[1], shape, *tune[3:7], named, *tune[8:]])
        conn.executemany(f"INSERT INTO kernels VALUES ({', '.join('?' * 14)})", kernels)
        conn.executemany(f"INSERT INTO tunes VALUES ({', '.join('?' * 11)})", tunes)
    conn.close()


def test_check_with_no_compiler_judges_tunes_of_their_own_kernels_reading_each_row_once(
    warm: Warm,
    tmp_path: Path,
    signed_small: tuple[Path, Path, Path],  # noqa: F811
) -> None:
    """With no compiler here, `warm check` judged each measured tune's pick against the build
    production is served, found by reading every row of the pick's entry once per kernel
    (hostile38 kept 4,096 verdicts; a tune naming a kernel of its own missed them all):
    n tunes each picking its own kernel of one entry read n x n rows (2,000: 55 s; a
    few MB of bundle could run for hours). Each kernel's verdict is kept as it is judged
    now (`served_builds`, a temporary file): each row streamed once, as with a compiler, the
    same verdict. (Counted, not timed: 100 tunes streamed 10,811 rows, 206 now.)"""
    _, _, unsigned = signed_small
    bundle = tmp_path / "own.warm"
    shutil.copyfile(unsigned, bundle)
    _tunes_of_their_own(bundle, 100)
    with_cc = _warm_read(warm, "check", bundle)
    without = _warm_read(warm, "check", bundle, WARM_CC=str(tmp_path / "no-cc"))
    for done in (with_cc, without):
        assert done.code == 1 and "Traceback" not in done.said, done.said[-800:]
    said = with_cc.said.splitlines()[1]
    assert said == without.said.splitlines()[1], (with_cc.said, without.said)
    assert "105 kernel(s), 101 tune(s): 100 not servable here" in said, said
    rows = 105 + 101  # each kernel's row and each tune's streamed once (n x n: 10,811)
    assert without.rows <= with_cc.rows <= rows, (without.rows, with_cc.rows)
