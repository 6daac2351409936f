"""Forked processes that read one open bundle beside the caller (`warm verify`, `warm diff`,
`warm stats --json` on a large bundle): how many, how they start, how each reopens it.

`worker_count` is how many processes a listing may use: one per CPU this process may run
on (`os.sched_getaffinity`), at most `MAX_WORKERS`, and 1 (read it all here) off Linux
(they are forked) or where threads are running (never forked then). `Reopen` names the
file an open bundle reads (its path and its device and inode); `Reopen.read` runs in a
worker: it opens the path read-only, in one read transaction (`snapshot`), and runs a
reading on it, or returns None where the path names another file now (replaced
meanwhile), so the caller reads that part itself. Every process reads the same state
only where the caller keeps its own read transaction open the whole time (`snapshot`,
as `warm verify`, `warm diff` and `warm stats --json` do): no writer commits meanwhile.
`Workers` starts the processes (forked, all at once on the first `submit`, before its
one thread starts; SIGINT blocked, then ignored: the caller's to answer (SIGTERM and
SIGHUP end a worker), and
`stop` drops what is not begun and waits for the part each is reading); a worker that
dies (SIGKILL, out of memory) fails its part and every part not yet done (`done` gives
None: the caller reads them itself), never hangs the caller; so does a pool that cannot
start (no descriptor left for its pipes, `ulimit -n`; a fork refused): the workers it did
fork are ended at once, so none waits for work that never comes (and the interpreter's
exit, for it). This module owns no state
beyond the processes a caller starts, and never writes or prints.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

MAX_WORKERS = 16
_T = TypeVar("_T")


def worker_count() -> int:
    """How many processes may read a bundle at once (1: read it in this one)."""
    if sys.platform != "linux" or threading.active_count() > 1:
        return 1  # fork is Linux's way to start processes; never with threads running
    return min(len(os.sched_getaffinity(0)), MAX_WORKERS)


def _identity(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_dev, st.st_ino


class Reopen:
    """What a worker needs to open the file an open bundle reads (see the module doc).
    A plain class (no dataclass): a serving process imports this module, not `dataclasses`."""

    __slots__ = ("ident", "opener", "path")

    def __init__(self, opener: Any, path: str, ident: tuple[int, int]) -> None:
        self.opener = opener  # the bundle's class: its `open(path)` opens read-only
        self.path = path
        self.ident = ident

    @classmethod
    def of(cls, bundle: Any) -> Reopen:
        path = str(bundle.path)
        return cls(type(bundle), path, _identity(path))

    def read(self, reading: Callable[[Any], _T]) -> _T | None:
        """In a worker: `reading` of the bundle opened again, in one snapshot; None if the
        path is no longer the file the caller holds open."""
        if _identity(self.path) != self.ident:
            return None
        with self.opener.open(self.path) as bundle, bundle.snapshot():
            if _identity(self.path) != self.ident:  # replaced while it was opened
                return None
            return reading(bundle)


_STOPS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _quiet() -> None:
    """First in each worker: SIGINT (Ctrl-C reaches the whole process group) is ignored;
    the caller stops its workers (`Workers.stop`) and says it was interrupted. SIGTERM
    (SIGHUP) ends a worker by its default action, never the caller's handler (the pool terminates
    the others so when one dies: ignored, they would hang it). A worker is forked with
    both blocked (`Workers.submit`), so one sent before this is dropped or ends it here,
    never raised in the fork's own start (an "Exception ignored" on stderr)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOPS)


class Workers:
    """`count` forked processes (a `concurrent.futures` pool: a worker that dies breaks
    it, and every part it had not done fails at once instead of being lost)."""

    def __init__(self, count: int) -> None:
        import multiprocessing  # a large bundle's listing only: never paid on open
        from concurrent.futures import ProcessPoolExecutor

        fork = multiprocessing.get_context("fork")
        self._executor = ProcessPoolExecutor(count, mp_context=fork, initializer=_quiet)
        self._broken = False

    def submit(self, fn: Callable[..., _T], *args: Any) -> Any:
        """A future of `fn(*args)` in a worker, or None where the pool is broken already."""
        if self._broken:
            return None
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)  # the forks'
        try:
            return self._executor.submit(fn, *args)  # (the first forks the workers)
        except RuntimeError:  # BrokenProcessPool: a worker died; the caller reads it
            return None
        except OSError:  # the pool could not start (a pipe, a fork refused): the caller reads it
            self._give_up()
            return None
        finally:  # a SIGINT (SIGTERM) meanwhile is raised here, in the caller, as answered
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    @staticmethod
    def done(future: Any) -> Any:
        """What a worker returned, or None where it failed or died (the caller reads it)."""
        if future is None:
            return None
        try:
            return future.result()
        except Exception:  # a corrupt row raises in the caller, where it stands
            return None

    def _give_up(self) -> None:
        """End the workers a pool that could not start forked (it never started the thread
        that would feed or stop them) and wait for them: each waits for work only."""
        self._broken = True
        started = getattr(self._executor, "_processes", None) or {}
        for process in list(started.values()):
            with contextlib.suppress(OSError, ValueError):
                process.terminate()
                process.join()
        with contextlib.suppress(Exception):  # its pipes let go now: the caller needs them
            self._executor.shutdown(wait=False, cancel_futures=True)

    def stop(self) -> None:
        """Drop every part not begun and wait for the workers to end: each finishes the part
        it is reading (never killed: one killed while it sends its result would leave the
        pool's reader waiting for the rest of it forever)."""
        if self._broken:  # (nothing to wait for: `_give_up` did)
            return
        self._executor.shutdown(wait=True, cancel_futures=True)
