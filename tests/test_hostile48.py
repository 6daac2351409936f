"""Holes hostile48 found, each reproduced for real: the real CLI in a subprocess, real SQLite
files (a bundle from `warm run`, edited with sqlite3 as an attacker would)."""

from __future__ import annotations

import shutil
import sqlite3
import struct
import subprocess
import sys
import zlib
from pathlib import Path

from conftest import ROOT, Warm
from test_blob_memory import _PEAK


def _peak(warm: Warm, *args: object) -> int:
    """The peak RSS, in bytes, of `warm *args` (its exit code 0 or 1)."""
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK, *map(str, args)],
        capture_output=True,
        text=True,
        env=warm.env,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr[-1500:]
    return int(proc.stderr.rsplit("peak ", 1)[1].split()[0])


def _tunes_of_many_samples(source: Path, path: Path, tunes: int, samples: int) -> Path:
    """`source` with `tunes` more tunes of its first's operation (keyed as warm keys them),
    each of one measured candidate, its pick 'a', holding `samples` samples of 0.0: packed
    as format 2 packs them, deflated (500,000 samples: a row of ~7 KB inflating to 4 MB)."""
    from warmcli.records import tune_key

    shutil.copyfile(source, path)
    conn = sqlite3.connect(path)
    with conn:
        row = conn.execute("SELECT * FROM tunes ORDER BY rowid LIMIT 1").fetchone()
        operation, shape, device, checksum = row[1], row[2], row[3], row[4]
        (kernel,) = conn.execute("SELECT key FROM kernels LIMIT 1").fetchone()
        # ok, timed, its kernel key whole; named 'a'; its median, its samples, no reason
        one = struct.pack("<BI", 3, 1) + b"a" + bytes.fromhex(kernel)
        one += struct.pack("<dI", 1e-4, samples)
        raw = struct.pack("<I", 1) + one + bytes(8 * samples) + struct.pack("<I", 0)
        packed = b"\1" + zlib.compress(raw, 9)
        for i in range(tunes):
            key = bytes.fromhex(tune_key(operation, f"{shape} {i}", device, checksum.hex()))
            values = (key, operation, f"{shape} {i}", device, checksum, row[5], "a", packed)
            conn.execute(
                "INSERT INTO tunes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values + row[8:]
            )
    conn.close()
    return path


def test_stats_holds_no_samples_of_the_tunes_it_lists(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A tune's packed candidates may inflate to 4 MiB of samples (500,000 of 0.0 from a row
    of ~7 KB). `warm stats` made each tune into what its tables show as it read it, but kept
    every sample of the candidates listed, which no table shows: 100 such tunes (a 737 KB
    bundle) took 2.0 GB (and `--explain` the same); 12 took ~240 MB more than the bundle
    without them. Now the listed candidates keep none (100 tunes: 100 MB)."""
    warm, good = made
    many = _tunes_of_many_samples(good, tmp_path / "many.warm", tunes=12, samples=500_000)
    flat = _peak(warm, "stats", good)
    grown = _peak(warm, "stats", many) - flat
    assert grown < 64 << 20, f"{grown >> 20} MiB more"
    shown = warm("stats", many, "--explain", "matmul")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.count("100.0 µs") == 12, shown.stdout[-2000:]
