"""Hostile tune rows for tests: a good bundle's copy with more tunes like its first, each
holding packed candidates a test crafted (tests/test_hostile46.py, tests/test_hostile48.py)."""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path


def add_tunes(
    source: Path, path: Path, tunes: int, packed: bytes | Callable[[int], bytes], pick: str
) -> Path:
    """`source` copied to `path` with `tunes` more tunes of its first's operation, keyed as
    warm keys them (shapes "<first's shape> i"), each holding `packed` candidates (or the i-th
    `packed(i)`) and picking `pick`."""
    from warmcli.records import tune_key

    shutil.copyfile(source, path)
    conn = sqlite3.connect(path)
    with conn:
        row = conn.execute("SELECT * FROM tunes ORDER BY rowid LIMIT 1").fetchone()
        operation, shape, device, checksum = row[1], row[2], row[3], row[4]
        for i in range(tunes):
            key = bytes.fromhex(tune_key(operation, f"{shape} {i}", device, checksum.hex()))
            held = packed(i) if callable(packed) else packed
            values = (key, operation, f"{shape} {i}", device, checksum, row[5], pick, held)
            conn.execute(
                "INSERT INTO tunes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values + row[8:]
            )
    conn.close()
    return path


def first_kernel_key(source: Path) -> str:
    """The key of `source`'s first kernel row, as its text."""
    conn = sqlite3.connect(source)
    try:
        (kernel,) = conn.execute("SELECT key FROM kernels LIMIT 1").fetchone()
    finally:
        conn.close()
    return str(kernel)


def add_other_tunes(path: Path, count: int, operation: str = "other") -> None:
    """`count` more tunes in `path`, copies of its first under `operation` (shapes "s<i>"):
    enough of them make a bundle too large to list (`warm stats` summarises it)."""
    from warmcli.records import tune_key

    conn = sqlite3.connect(path)
    with conn:
        row = conn.execute("SELECT * FROM tunes ORDER BY rowid LIMIT 1").fetchone()
        for i in range(count):
            key = bytes.fromhex(tune_key(operation, f"s{i}", row[3], row[4].hex()))
            values = (key, operation, f"s{i}", *row[3:])
            conn.execute("INSERT INTO tunes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values)
    conn.close()
