"""A bundle's SQLite connection, whose wait for another process's lock a signal stops at once.

SQLite waits for a lock another process holds inside its busy handler, in C, where Python's
signal handlers cannot run: a Ctrl-C, or a SIGTERM whose handler raises, sent meanwhile was
acted on only once the wait ended, up to `LOCK_WAIT_SECONDS` later (past a pod's grace
period: the pod was killed). A `Waiting` connection has SQLite wait `SLICE_SECONDS` at a time
(its busy timeout) and runs a statement that found the lock held again, from Python, until
`wait_seconds` have passed since it was first tried; then SQLite's "database is locked" is
raised, as its one long wait raised it. A signal's handler runs between two tries. A try that
SQLite refused without waiting (a deadlock it avoids, or its wait cut short by a signal) is
followed by the rest of its slice, asleep. Every statement warm runs first steps in `execute`
(its rows are then stepped under the lock that took; an `executemany` only ever runs inside
a write transaction, whose lock is held), so this is the one place a lock is waited for.
`busy` says whether an SQLite error is a lock held. It owns no state, and never prints.
"""

from __future__ import annotations

import _sqlite3 as sqlite3  # as `warmcli.bundle.file`
import time
from typing import Any

SLICE_SECONDS = 0.05  # the longest SQLite waits in C at a time: the latency of a signal
_execute = sqlite3.Connection.execute  # (one frame less on the path that serves)


def busy(exc: BaseException) -> bool:
    """Whether `exc` is SQLite's "database is locked" (another process's lock held)."""
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


class Waiting(sqlite3.Connection):
    """See the module doc: made by `sqlite3.connect(..., timeout=SLICE_SECONDS, factory=
    Waiting)`, then given the whole wait (`wait_seconds`)."""

    wait_seconds = 60.0

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        try:
            return _execute(self, sql, parameters)
        except sqlite3.OperationalError as exc:
            if not busy(exc):
                raise
            first = exc
        return self._waited(sql, parameters, first)

    def _waited(self, sql: str, parameters: Any, exc: sqlite3.OperationalError) -> sqlite3.Cursor:
        """`execute` again, a slice at a time, until `wait_seconds` since the first try
        (which waited one slice, or less: a deadlock SQLite refused at once); then `exc`."""
        deadline = time.monotonic() - SLICE_SECONDS + self.wait_seconds
        while (tried := time.monotonic()) < deadline:
            try:
                return _execute(self, sql, parameters)
            except sqlite3.OperationalError as again:
                if not busy(again):
                    raise
                exc = again
            rest = SLICE_SECONDS - (time.monotonic() - tried)
            time.sleep(rest) if rest > 0 else None  # (a signal's handler may raise here too)
        raise exc
