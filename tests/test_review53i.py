"""Holes review53i found in stop 53's changes, each reproduced for real: the real CLI in a
started process (its peak memory), real SQLite files (an empty bundle warm made, edited with
sqlite3 as an attacker would)."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from conftest import Warm
from test_blob_memory import _peak

from warmcli.bundle.store import Bundle

# A table entry whose column defaults are long sums: SQLite keeps every parsed term (~70
# bytes) of each entry it loads, ~40 times the entry's size in memory
_SUM = "+".join(["1"] * 900)
_ENTRY = f"CREATE TABLE {{0}} (c0 DEFAULT ({_SUM}))"  # 1.8 KB: under any bound warm sets


def test_a_schema_of_many_entries_each_under_the_bound_never_sets_warms_memory(
    warm: Warm, tmp_path: Path
) -> None:
    """mut53a bounded SQLite's load of a schema not checked yet at 20,000 steps and 64 KiB a
    value, but SQLite parses each entry it loads, and holds it parsed: 2,000 entries of 60 KB
    of sums (a 164 MB file) took `warm stats` 4 GB and 25 s before the refusal; 1,500 of 1.8
    KB (3 MB) 100 MB. The bounds are warm's own schema's with a margin now (2 KiB, 1,000
    steps; warm's, any format: 389 bytes, 221 steps): the same refusal, a few MB more."""
    good = tmp_path / "good.warm"
    Bundle.create(good).close()
    hostile = tmp_path / "hostile.warm"
    shutil.copyfile(good, hostile)
    with sqlite3.connect(hostile, isolation_level=None) as conn:
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute("BEGIN")  # (one transaction: one sync)
        conn.executemany(
            "INSERT INTO sqlite_master VALUES ('table', ?1, ?1, 0, ?2)",
            ((f"t{n}", _ENTRY.format(f"t{n}")) for n in range(1500)),
        )
        conn.execute("COMMIT")
    conn.close()
    code, flat, said = _peak(warm, "stats", good)
    assert code == 0, said
    code, grown, said = _peak(warm, "stats", hostile)
    assert code == 2 and "refused: its schema is not warm's" in said, said
    assert grown - flat < 16 << 20, f"{(grown - flat) >> 20} MiB more"
