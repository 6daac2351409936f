"""The bundle's write lock: `write_lock`, an exclusive `flock` of `<bundle>.lock`.

Writers of a bundle (a run's passes, a merge, production's write-back) take it;
readers never do. It is `fcntl.flock` on a file descriptor, so the lock dies with its
process and nothing is left to clean but the empty lock file (which `remove_leftovers`
of `warmcli.bundle.file` removes for dead writers' temporary files). A thread that
holds it may take it again. Only where `flock` is missing (no `fcntl`, or a file
system without it) is the `filelock` package's `SoftFileLock` used, on its own file
`<bundle>.softlock` (the `.lock` file this module made exists, so a soft lock of that
name would wait for ever): importing it costs tens of milliseconds that every
`warm run` paid. State: per thread, the lock
files it holds (and how often). It never reads or writes a bundle.
"""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from warmcli.errors import BundleError


@contextmanager
def write_lock(path: Path) -> Iterator[None]:
    """warm's write lock of the bundle at `path` (`<bundle>.lock`, which readers never
    take): an exclusive `flock` of that file, held by one thread at a time (a thread that
    holds it may take it again); a lock file that cannot be made is a one-line
    `BundleError`. Where `flock` is missing (no `fcntl`, or a file system without it),
    the `filelock` package's soft lock of `<bundle>.softlock` is taken instead."""
    name = f"{path}.lock"
    held: dict[str, int] = _held.__dict__.setdefault("counts", {})
    if held.get(name):  # this thread holds it already
        held[name] += 1
        try:
            yield
        finally:
            held[name] -= 1
        return
    fd = _flock(path, name)
    held[name] = 1
    try:
        if fd is None:
            with _soft_lock(path, f"{path}.softlock"):
                yield
        else:
            yield
    finally:
        del held[name]
        if fd is not None:
            os.close(fd)  # which releases the lock


_held = threading.local()  # per thread: the lock files it holds, and how many times


def _flock(path: Path, name: str) -> int | None:
    """The lock file's descriptor, exclusively locked (waiting for other writers); None
    where `flock` is missing. Imports nothing that `filelock` would (tens of ms)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return None
    try:
        try:
            fd = os.open(name, os.O_RDWR | os.O_CREAT, 0o666)
        except PermissionError:  # another user's lock file: locking needs only reading it
            fd = os.open(name, os.O_RDONLY)
    except OSError as exc:
        raise BundleError(f"{path}: cannot take the write lock {name}: {exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK):
            return None  # a file system without flock
        raise BundleError(f"{path}: cannot take the write lock {name}: {exc}") from None
    except BaseException:  # interrupted while waiting
        os.close(fd)
        raise
    return fd


@contextmanager
def _soft_lock(path: Path, name: str) -> Iterator[None]:
    """A lock file `name` that exists while it is held (one a dead holder left is
    reclaimed by `filelock`): for file systems without `flock`."""
    from filelock import SoftFileLock  # imported only where flock is missing

    lock = SoftFileLock(name)
    try:
        lock.acquire()
    except OSError as exc:
        raise BundleError(f"{path}: cannot take the write lock {name}: {exc}") from None
    try:
        yield
    finally:
        lock.release()
