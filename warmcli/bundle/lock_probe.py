"""Whether SQLite's lock on a bundle is free now, asked without waiting.

A read-only reader that waited `LOCK_WAIT_SECONDS` out once (`rows.RowReader._locked`: a
writer stopped mid-write, or a commit that long, a `warm clean` VACUUM of a big bundle) asks
`free` before each later read: while the lock is held that read is a miss at once, never
waited for again; once it is free the bundle serves again, as before the wait. No state.
"""

from __future__ import annotations

import _sqlite3 as sqlite3  # as `warmcli.bundle.file`

from warmcli.bundle.waiting import busy


def free(conn: sqlite3.Connection) -> bool:
    """Whether a read on `conn` finds SQLite's lock free now (its busy timeout set to 0 for
    the one read, tried once, then as it was); another failure than a lock is left to the
    read itself (True: a journal a writer killed since left, say, which the read's retry
    rolls back)."""
    (before,) = conn.execute("PRAGMA busy_timeout").fetchone()
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        # SQLite's own `execute`: a `Waiting` connection's would try again for the whole wait
        sqlite3.Connection.execute(conn, "SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.Error as exc:
        return not busy(exc)
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(before)}")
    return True
