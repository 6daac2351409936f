"""A bundle another process kept locked when this production process first opened it.

A production process that opens its bundle while a writer holds SQLite's lock past the wait
(a commit that long, a `warm clean` of a big bundle, a writer stopped mid-write) runs cold,
said once (`warmcli.production`). Its runtimes are handed a `Reopening` in place of the
bundle: a store that is the bundle once it could be opened, and until then answers every
read with the `BundleLocked` it was refused with (a miss the runtime builds cold, explained
`locked`, as it is for a process whose open bundle a writer locked later). At a read at
least `REOPEN_SECONDS` after its last try it tries again: the lock probed without waiting
(`lock_probe.free`), and the bundle opened only where it is free, by that one read: another
thread's read meanwhile is answered `BundleLocked` at once, never waiting for the open (which
waits as a first open does where another writer took the lock since the probe; a child
forked meanwhile opens its own), and one closed meanwhile (`use_bundle`) closes what that
open gave. A try that fails another way (the file removed, or replaced by one that is no
bundle; a FIFO too, or one beside it as its journal, which the probe never opens: it would
wait for the pipe's writer) is kept, `refused`, for the report, and tried again as late. It
owns the bundle it opened (closed with it) and its lock; it never prints.
"""

from __future__ import annotations

import _sqlite3 as sqlite3  # as `warmcli.bundle.file`
import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from warmcli.bundle.core import BundleCore
from warmcli.bundle.lock_probe import free
from warmcli.errors import BundleError, BundleLocked
from warmcli.forking import new_lock
from warmcli.records import KernelRecord, TuneRecord

REOPEN_SECONDS = 5.0  # the least time between two tries at opening it (at a read)


class Reopening:
    """See the module doc: the store at `path` (opened by `opener`) once it could be."""

    def __init__(self, path: str, opener: Callable[[], BundleCore], locked: BundleLocked) -> None:
        self._lock = new_lock(self)
        self.path, self._opener, self._locked = path, opener, locked
        self._next = time.monotonic() + REOPEN_SECONDS
        self.bundle: BundleCore | None = None
        self.closed = False
        self._opening = 0  # the process whose thread opens it now (a forked child's: none)
        self.refused = ""  # why its last try failed, another way than locked (a file replaced)

    def _store(self) -> BundleCore:
        """The bundle, opened now if it is free and it is time to try; else `BundleLocked`."""
        if self.bundle is not None:
            return self.bundle
        with self._lock:
            if self.bundle is not None:
                return self.bundle
            now = time.monotonic()
            opening = self._opening == os.getpid()
            if self.closed or opening or now < self._next or not _free(self.path):
                self._next = max(self._next, now + REOPEN_SECONDS)
                raise BundleLocked(str(self._locked))
            self._next, self._opening = now + REOPEN_SECONDS, os.getpid()
        try:
            bundle = self._opener()  # this read alone (locked again meanwhile: `BundleLocked`)
        except BundleError as exc:  # (tried again as late: a file replaced may be back)
            self.refused = "" if isinstance(exc, BundleLocked) else str(exc)
            raise
        finally:
            with self._lock:
                self._opening = 0
        with self._lock:
            if not self.closed:
                self.bundle = bundle
                return bundle
        bundle.close()  # closed while it opened: nobody's
        raise BundleLocked(str(self._locked))

    def close(self) -> None:
        with self._lock:
            self.closed = True
            if self.bundle is not None:
                self.bundle.close()

    def __getattr__(self, name: str) -> Any:
        """A read of `warmcli.runtime.store.Store` (`kernel`, `blob`, ...): the bundle's."""
        if name.startswith("_"):  # copy's and pickle's probes, and this one's own
            raise AttributeError(name)
        return lambda *args, **kwargs: getattr(self._store(), name)(*args, **kwargs)

    def put(
        self,
        kernels: Iterable[tuple[KernelRecord, bytes]] = (),
        tunes: Iterable[TuneRecord] = (),
        fingerprints: Iterable[tuple[str, str, dict[str, object]]] = (),
        held: set[str] | None = None,
        now: float | None = None,
    ) -> tuple[int, int]:
        raise BundleError(f"{self.path}: served read-only (it was locked when opened)")

    def touch(self, last_used: Mapping[str, float]) -> int:
        raise BundleError(f"{self.path}: served read-only (it was locked when opened)")


def _free(path: str) -> bool:
    """Whether SQLite's lock on the file at `path` is free now (probed, never waited for).
    No regular file there, or a journal, `-wal` or `-shm` that is none (a FIFO, whose open
    waits for a writer of the pipe) is not opened: True, and the open refuses it without
    waiting (`read_header`, `check_journal`). A schema not checked yet (a file swapped in)
    is loaded within an open's bounds before its check (`_connect`'s)."""
    import stat

    from warmcli.bundle.file import _connect, _read_only_uri  # (a name of no UTF-8 too)
    from warmcli.bundle.journal import check_journal, check_wal_files

    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return True
        check_journal(path)
        check_wal_files(path)
    except (OSError, BundleError):
        return True  # (opening it says why)
    try:
        conn = _connect(_read_only_uri(path), uri=True)  # a file replaced: its schema bound
    except sqlite3.Error:
        return True  # (opening it says why)
    try:
        return free(conn)
    finally:
        conn.close()
