"""The bundle's write lock: `write_lock`, an exclusive `flock` of `<bundle>.lock`.

The lock file is beside the file the path leads to (`os.path.realpath`): a bundle
named through a symbolic link and by its own name takes one lock. The lock file itself
is never followed: one that is a symbolic link (planted beside a bundle handed over, it
would have warm create the file it names) or no regular file is refused.

Writers of a bundle (a run's passes, a merge, a clean, production's write-back) take
it; readers never do. It is `fcntl.flock` on a file descriptor, so the lock dies with
its process and nothing is left but the empty lock file, kept for the next writer (a
dead merge's temporary bundle goes with its lock file: `remove_leftovers` of
`warmcli.bundle.file`; a failed first run's, `remove_new`: a writer that waited on a lock
file removed meanwhile takes the new one by its name, never the removed one). A thread that
holds it may take it again. Only where `flock` is missing (no `fcntl`, or a file
system without it) is the `filelock` package's `SoftFileLock` used, on its own file
`<bundle>.softlock` (the `.lock` file this module made exists, so a soft lock of that
name would wait for ever): importing it costs tens of milliseconds that every
`warm run` paid. A release unlocks before it closes, so a forked child that still
has the descriptor never keeps the lock. State: per thread, the lock files it holds
(and how often), forgotten in a forked child (the lock is its parent's), whether its wait
was told, and how long it waits for other writers (`waiting_at_most`; unbounded otherwise);
per process, who is told of a wait past two seconds (`told_of_waits`: the CLI, which says
so in one line; a soft lock's wait too). It never reads or writes a bundle.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING

from warmcli.errors import CANNOT_LOCK, CANNOT_TAKE_LOCK, DISK_FULL, BundleError
from warmcli.printable import printable

if TYPE_CHECKING:
    from pathlib import Path


@contextmanager
def write_lock(path: Path) -> Iterator[None]:
    """warm's write lock of the bundle at `path` (`<bundle>.lock`, which readers never
    take): an exclusive `flock` of that file, held by one thread at a time (a thread that
    holds it may take it again); a lock file that cannot be made is a one-line
    `BundleError`. Where `flock` is missing (no `fcntl`, or a file system without it),
    the `filelock` package's soft lock of `<bundle>.softlock` is taken instead. A path
    through a symbolic link is locked as the file it leads to."""
    name = f"{os.path.realpath(path)}.lock"
    held: dict[str, int] = _held.__dict__.setdefault("counts", {})
    if held.get(name):  # this thread holds it already
        held[name] += 1
        try:
            yield
        finally:
            held[name] -= 1
        return
    owned: list[int] = []  # the lock file's descriptor, as soon as it is open
    pid = os.getpid()
    try:
        flocked = _flock(path, name, owned)
        held[name] = 1
        with nullcontext() if flocked else _soft_lock(path, f"{name[:-5]}.softlock"):
            yield
    finally:
        held.pop(name, None)
        for fd in owned:
            _release(fd, unlock=os.getpid() == pid)


# Opened without following a link (one planted beside a bundle would have warm create, or
# open as its terminal, whatever it names), nor waiting on a FIFO.
_NO_FOLLOW = sum(getattr(os, f"O_{f}", 0) for f in ("NOFOLLOW", "NONBLOCK", "NOCTTY", "CLOEXEC"))
_held = threading.local()  # per thread: the lock files it holds, and how many times


def _forget_held() -> None:
    """In a forked child: the locks its parent's thread held are not the child's."""
    _held.counts = {}


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_held)


@contextmanager
def waiting_at_most(seconds: float) -> Iterator[None]:
    """While inside, this thread's `write_lock` waits `seconds` at most for other writers,
    then raises a one-line `BundleError` (a production write-back at exit, which must end)."""
    before = getattr(_held, "wait", None)
    _held.wait = seconds
    try:
        yield
    finally:
        _held.wait = before


def _flock(path: Path, name: str, owned: list[int]) -> bool:
    """Whether `flock` took the lock of `name` exclusively (waiting for other writers, for
    `waiting_at_most`'s seconds at most); False where it is missing. The descriptor goes
    into `owned` as soon as it is open, so that the caller's `finally` closes it whatever
    interrupts (a KeyboardInterrupt while waiting included). A lock file removed while it
    was waited for (`remove_new`'s, or a dead merge's) is let go and taken again by its
    name: held, it would lock nothing the next writer's new file does (two writers).
    Imports nothing that `filelock` would (tens of ms). A wait is told once, however many
    files it waits on (`_held.told`)."""
    _held.told = False
    for _ in range(_RETAKES):
        if not _flock_once(path, name, owned):
            return False
        if _still_named(owned[-1], name):
            return True
        _release(owned.pop(), unlock=True)  # removed meanwhile: a new one is made
    raise BundleError(f"{path}: {CANNOT_TAKE_LOCK} {name}: it is removed each time")


_RETAKES = 100  # lock files removed under a waiter in a row (each removal is a writer's)


def _still_named(fd: int, name: str) -> bool:
    """Whether the lock file open at `fd` is the file `name` names now."""
    try:
        named, mine = os.lstat(name), os.fstat(fd)
    except OSError:
        return False
    return (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino)


def _flock_once(path: Path, name: str, owned: list[int]) -> bool:
    """`_flock`, of the file `name` names as it is opened, removed meanwhile or not."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return False
    try:
        try:
            owned.append(os.open(name, os.O_RDWR | os.O_CREAT | _NO_FOLLOW, 0o666))
        except PermissionError as denied:  # another user's lock file: reading it is enough
            if not os.path.lexists(name):  # none to read: its folder may not be written
                raise BundleError(
                    f"{path}: {CANNOT_LOCK} {name}: its folder is not writable "
                    f"by you ({denied.strerror})"
                ) from None
            owned.append(os.open(name, os.O_RDONLY | _NO_FOLLOW))
        if not stat.S_ISREG(os.fstat(owned[-1]).st_mode):
            raise BundleError(f"{path}: refused: its write lock {name} is not a regular file")
    except OSError as exc:
        if os.path.islink(name):  # never followed: a link would have warm create its target
            raise BundleError(
                f"{path}: refused: its write lock {os.path.basename(name)} is a symbolic link "
                f"(to {printable(os.readlink(name))}); remove it"
            ) from None
        why = exc.strerror if exc.strerror and exc.filename == name else exc  # (named once)
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)  # no inode for it: said as a full disk
        why = f"{DISK_FULL} ({why})" if full else why  # (a merge's: "nothing was merged")
        raise BundleError(f"{path}: {CANNOT_TAKE_LOCK} {name}: {why}") from None
    wait: float | None = getattr(_held, "wait", None)
    try:
        if wait is None and _told[0] is None:
            fcntl.flock(owned[-1], fcntl.LOCK_EX)
        else:
            _flock_within(owned[-1], wait, path, name)
    except OSError as exc:
        if exc.errno in (errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK):
            os.close(owned.pop())
            return False  # a file system without flock
        raise BundleError(f"{path}: {CANNOT_TAKE_LOCK} {name}: {exc}") from None
    return True


def _flock_within(fd: int, seconds: float | None, path: Path, name: str) -> None:
    """`flock` of `fd`, tried until it is taken or `seconds` have passed (`BundleError`; None:
    for ever); a wait past `TOLD_AFTER` seconds told once, to `told_of_waits`'s listener."""
    import fcntl

    start, listener = time.monotonic(), _told[0]  # (read once: a listener let go meanwhile)
    told = listener is None or getattr(_held, "told", False)  # (of a removed file's wait)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            waited = time.monotonic() - start
            if seconds is not None and waited >= seconds:
                raise BundleError(
                    f"{path}: another writer held the write lock {name} for {seconds:g} s"
                ) from None
            if listener is not None and not told and waited >= TOLD_AFTER:
                told = _held.told = True
                listener(_waiting_line(path, _holder(fd)))
                if seconds is None:  # told: now as `flock` waits (Ctrl-C still stops it)
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    return
            time.sleep(0.05)


TOLD_AFTER = 2.0  # seconds a writer waits for the lock before it is told (`told_of_waits`)
_told: list[Callable[[str], None] | None] = [None]  # the process's listener, if any


@contextmanager
def told_of_waits(listener: Callable[[str], None]) -> Iterator[None]:
    """While inside, a `write_lock` of this process (any thread's) that waits for another
    writer past `TOLD_AFTER` seconds tells `listener` once, in one line naming the bundle
    and the holder's pid where the system says it (`/proc/locks`), and keeps waiting."""
    before, _told[0] = _told[0], listener
    try:
        yield
    finally:
        _told[0] = before


def _waiting_line(path: Path, holder: int | None) -> str:
    """The line a writer waiting for another's lock of `path` is told (`told_of_waits`)."""
    pid = f" (pid {holder})" if holder else ""
    return f"waiting for another warm writing {printable(str(path))}{pid} to finish"


def _holder(fd: int) -> int | None:
    """The pid holding an exclusive `flock` of the file open at `fd`, as Linux's
    `/proc/locks` lists it; None where it cannot say (another system, another pid space)."""
    try:
        mine = os.fstat(fd)
        place = f"{os.major(mine.st_dev):02x}:{os.minor(mine.st_dev):02x}:{mine.st_ino}"
        with open("/proc/locks", encoding="ascii", errors="replace") as locks:
            for line in locks:
                fields = line.split()
                if fields[1:2] == ["FLOCK"] and len(fields) > 5 and fields[5] == place:
                    return int(fields[4]) if fields[4].isdigit() and int(fields[4]) else None
    except (OSError, ValueError):
        pass
    return None


def _release(fd: int, *, unlock: bool) -> None:
    """Close the lock file's descriptor, unlocking it first (`unlock`: in the process
    that took it): closing alone leaves the lock held while a forked child still has
    the descriptor open. A forked child only closes its copy, never unlocking its
    parent's lock."""
    try:
        if unlock:
            import fcntl

            fcntl.flock(fd, fcntl.LOCK_UN)
    except OSError:  # pragma: no cover - closing releases it where nothing shares fd
        pass
    finally:
        os.close(fd)


@contextmanager
def _soft_lock(path: Path, name: str) -> Iterator[None]:
    """A lock file `name` that exists while it is held (one a dead holder left is
    reclaimed by `filelock`): for file systems without `flock`. A wait past `TOLD_AFTER`
    seconds is told to `told_of_waits`'s listener once, as `flock`'s is (no pid)."""
    from filelock import SoftFileLock, Timeout  # imported only where flock is missing

    lock, listener = SoftFileLock(name), _told[0]
    try:
        wait = getattr(_held, "wait", None)
        if listener is not None and (wait is None or wait > TOLD_AFTER):
            try:  # a wait past TOLD_AFTER said once, as flock's (`_flock_within`)
                lock.acquire(timeout=TOLD_AFTER)
            except Timeout:
                listener(_waiting_line(path, None))
                lock.acquire(timeout=-1 if wait is None else wait - TOLD_AFTER)
        else:
            lock.acquire(timeout=-1 if wait is None else wait)
    except OSError as exc:
        raise BundleError(f"{path}: {CANNOT_TAKE_LOCK} {name}: {exc}") from None
    try:
        yield
    finally:
        lock.release()
