"""A bundle's SQLite connection, whose wait for another process's lock a signal stops at once.

SQLite waits for a lock another process holds inside its busy handler, in C, where Python's
signal handlers cannot run: a Ctrl-C, or a SIGTERM whose handler raises, sent meanwhile was
acted on only once the wait ended, up to `LOCK_WAIT_SECONDS` later (past a pod's grace
period: the pod was killed). A `Waiting` connection has SQLite wait `SLICE_SECONDS` at a time
(its busy timeout) and runs a statement that found the lock held again, from Python, until
`wait_seconds` have passed since it was first tried; then SQLite's "database is locked" is
raised, as its one long wait raised it. A signal's handler runs between two tries. A try that
SQLite refused without waiting (a deadlock it avoids, or its wait cut short by a signal) is
followed by the rest of its slice, asleep. Where a stop signal came during a hold
(`warmcli.interrupted.held_interrupts`: a write and its count are one step), a `BEGIN` or
`COMMIT` waiting ends with `KeyboardInterrupt`: the step is undone (the transaction rolled
back by its caller), then the hold answers the signal. Every statement warm runs first steps
in `execute` (its rows are then stepped under the lock that took; an `executemany` only ever
runs inside a write transaction, whose lock is held), and every incremental blob handle is
opened by `blobopen` (which takes the read lock too, held until the handle closes), so these
are the two places a lock is waited for. Inside a write transaction (from `BEGIN IMMEDIATE` to
its `COMMIT` or `ROLLBACK`) SQLite waits for nothing: a statement whose changes outgrow the page
cache tries to spill them to the file, which needs every reader gone: waiting a slice for them
at each page read from then on made a 20,000-tune removal under a reader's lock last minutes,
a stop signal held all along. A spill refused at once leaves the pages in memory (as one refused
after a slice did), and only the commit waits for the readers. A transaction SQLite ended by
itself (the disk full, an I/O error, an interrupt: no COMMIT or ROLLBACK run) has the next
statement, or blob, find its slice again (`_zeroed`): it would else wait for nothing in C.
`busy` says whether an SQLite error is a lock held. A stop a fork's wait for a bundle's lock
noted, answered only at exit, ends the process as `end_as_stopped` ends one (`forking`'s).
It owns no state, and never prints.
"""

from __future__ import annotations

import _sqlite3 as sqlite3  # as `warmcli.bundle.file`
import time
from collections.abc import Callable
from typing import Any, TypeVar

from warmcli.forking import ENDS_STOPPED
from warmcli.interrupted import end_as_stopped, held_came

SLICE_SECONDS = 0.05  # the longest SQLite waits in C at a time: the latency of a signal
_SLICED = f"PRAGMA busy_timeout = {int(SLICE_SECONDS * 1000)}"
_BEGIN, _ENDS = "BEGIN IMMEDIATE", ("COMMIT", "ROLLBACK")
_STEPS = ("BEGIN ", "COMMIT")  # a write's wait to begin (another writer), to commit (readers)
_execute = sqlite3.Connection.execute  # (one frame less on the path that serves)
_blobopen = sqlite3.Connection.blobopen
_T = TypeVar("_T")
ENDS_STOPPED.append(end_as_stopped)  # (a stop at exit: see the module doc)


def busy(exc: BaseException) -> bool:
    """Whether `exc` is SQLite's "database is locked" (SQLITE_BUSY: another process's lock
    held), which a wait may end; never SQLITE_LOCKED ("database table is locked": a conflict
    within the connection itself, a table dropped while a statement reads it), which none
    ends. Told by its code, by its words only where it has none."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF == sqlite3.SQLITE_BUSY
    text = str(exc).lower()
    return "database is locked" in text or "busy" in text


class Waiting(sqlite3.Connection):
    """See the module doc: made by `sqlite3.connect(..., timeout=SLICE_SECONDS, factory=
    Waiting)`, then given the whole wait (`wait_seconds`)."""

    wait_seconds = 60.0
    _zeroed = False  # busy_timeout 0 set by a BEGIN IMMEDIATE, not yet set back

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        if sql in _ENDS or (self._zeroed and not self.in_transaction):  # (ended by SQLite)
            _execute(self, _SLICED)  # the commit's wait for readers: a slice at a time again
            self._zeroed = False
        try:
            cursor = _execute(self, sql, parameters)
        except sqlite3.OperationalError as exc:
            if not busy(exc):
                raise
            cursor = self._waited(lambda: _execute(self, sql, parameters), sql, exc)
        if sql == _BEGIN:  # the write lock taken: its statements never wait in C (below)
            _execute(self, "PRAGMA busy_timeout = 0")
            self._zeroed = True
        return cursor

    def blobopen(
        self, table: str, column: str, row: int, /, *, readonly: bool = False, name: str = "main"
    ) -> sqlite3.Blob:
        """SQLite's incremental blob handle, its wait for the read lock as `execute`'s (SQLite
        takes it to open one: a writer's commit held longer than a slice made it fail)."""
        if self._zeroed and not self.in_transaction:  # (a transaction SQLite ended)
            _execute(self, _SLICED)
            self._zeroed = False
        try:
            return _blobopen(self, table, column, row, readonly=readonly, name=name)
        except sqlite3.OperationalError as exc:
            if not busy(exc):
                raise
            first = exc
        return self._waited(
            lambda: _blobopen(self, table, column, row, readonly=readonly, name=name), "", first
        )

    def _waited(self, step: Callable[[], _T], sql: str, exc: sqlite3.OperationalError) -> _T:
        """`step` (the statement `sql` run, or a blob opened) again, a slice at a time, until
        `wait_seconds` since the first try (which waited one slice, or less: a deadlock SQLite
        refused at once); then `exc`."""
        deadline = time.monotonic() - SLICE_SECONDS + self.wait_seconds
        while (tried := time.monotonic()) < deadline:
            try:
                return step()
            except sqlite3.OperationalError as again:
                if not busy(again):
                    raise
                exc = again
            if held_came() and sql.lstrip()[:6].upper() in _STEPS:  # (a step's wait: undone)
                raise KeyboardInterrupt
            rest = SLICE_SECONDS - (time.monotonic() - tried)
            time.sleep(rest) if rest > 0 else None  # (a signal's handler may raise here too)
        raise exc
