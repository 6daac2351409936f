"""A Ctrl-C that lands while SQLite loads a bundle's schema is a Ctrl-C, never a corrupt bundle.

SQLite calls the progress handler that bounds a schema's load (`warmcli.bundle.file._connect`)
from C; a Python handler ran Python lines there, so a signal's handler ran in it, and the
`KeyboardInterrupt` it raised was swallowed by Python's sqlite3 module and became SQLite's
"interrupted": `warm merge` interrupted while it opened its new file said "corrupt bundle
(interrupted)", exit 2 (CI of c7eb8188, 1 run in ~40). A real SQLite connection as warm opens
one; the pending signal is set by `_thread.interrupt_main` called from SQL (C, so it runs no
Python line itself), so the handler is the first Python a signal could run in.
"""

from __future__ import annotations

import _thread
import sqlite3
from pathlib import Path

import pytest

from warmcli.bundle import file

# one call of the SQL function `poke` (the pending Ctrl-C), then ~200 steps: ~4 handler calls
POKED = (
    "SELECT poke(), (WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r "
    "WHERE i < 20) SELECT count(*) FROM r)"
)


def test_a_ctrl_c_during_a_bounded_load_is_a_keyboard_interrupt(tmp_path: Path) -> None:
    conn = file._connect(tmp_path / "b.warm")
    try:
        conn.create_function("poke", 0, _thread.interrupt_main)
        with pytest.raises(KeyboardInterrupt):  # (before: sqlite3.OperationalError "interrupted")
            conn.execute(POKED).fetchall()
    finally:
        conn.close()


def test_the_bound_still_stops_a_long_load(tmp_path: Path) -> None:
    """The handler still stops SQLite past `SCHEMA_CALLS` calls, and only then."""
    conn = file._connect(tmp_path / "b.warm")
    try:
        conn.execute("SELECT 1").fetchall()  # a short statement: no stop
        many = "WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r) SELECT max(i) "
        many += "FROM r"  # for ever, but for the bound
        with pytest.raises(sqlite3.OperationalError, match="interrupt"):
            conn.execute(many).fetchall()
        assert conn.steps.__length_hint__() == 0
    finally:
        conn.close()
