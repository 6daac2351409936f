"""A compile's scratch folder, and a process's held folder: each removed only by its maker.

A compile's scratch folder is `scratch_folder`'s, never `tempfile.TemporaryDirectory`'s,
whose exit-time finalizer a forked child inherits: a worker forked while another thread
compiled removed the folder at its own exit, under the parent's compiler (`warmcli.forking`
says what else a fork does to warm's state). A compiler runs in one, so the programs it finds
by a relative folder (`PATH=..:$PATH`) are found from there: `seen_from_scratch`; `climbs` says
whether a relative name leaves it (`../cfg.h`: `warmcli.backends.scratch_reads` refuses one).
A folder kept for a process's life (`HeldFolder`: the host libraries of one whose warm home
cannot hold them), or for a block (`held_folder`: a Dask shard's bundle), is removed at its end
(`remove`, or its finalizer: collected, or at exit, in the process that made it only), and while
it lives a `flock` on a descriptor of it says so (held by a child it forks without exec too, and
by a process it starts with `fds` passed on; let go by the kernel at any end, SIGKILL's,
SIGTERM's, `os._exit`'s): a dead process's, no lock held, is removed by the next process that
makes one (`remove_orphans`: only a folder of this user's under that prefix and `HELD`'s
suffix, unchanged for `ORPHAN_AGE_S`; never a link, a folder of another name, or one where
`flock` is missing). One whose lock its maker could not take (no descriptor left, no `flock`)
is named without `HELD`: no other's to remove; one whose lock it let go since (a daemon closed
every descriptor) is no longer `held`: its user makes another. It owns no state but each held
folder's descriptor, never prints, and writes nothing but the folders.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager

HELD = ".held"  # a held folder's suffix: one without it (an earlier warm's) is never removed
ORPHAN_AGE_S = 60.0  # a younger one may be a folder just made, its lock not yet taken


@contextmanager
def scratch_folder(prefix: str) -> Iterator[str]:
    """A new private temporary folder for the `with` block, removed at its end, only by the
    process that made it (a forked child, which has not the thread in the block, never)."""
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix=prefix)
    made_by = os.getpid()
    try:
        yield folder
    finally:
        if os.getpid() == made_by:
            shutil.rmtree(folder, ignore_errors=True)


def climbs(name: str) -> bool:
    """Whether relative `name`, read from a scratch folder, leaves it (`../cfg.h`, `./../h`):
    its first part but `.` is `..`. One through a folder first (`a/../../h`) is looked for in
    `a`, which a new scratch folder never holds (the system resolves each part in turn): the
    compiler finds nothing there and searches on, as the key does."""
    return next((part for part in name.split(os.sep) if part not in ("", ".")), "") == ".."


def seen_from_scratch(folder: str) -> str | None:
    """The folder a compiler run in a scratch folder (a new one in the temporary folder) reads
    as `folder`: itself where absolute; a relative one (`PATH`'s "" is `.`) from there, so None
    where it stays inside (`.`, `bin`, `a/../../bin`: a new folder holds no program, no `a`:
    `climbs`), the temporary folder for `..` (`../bin`: a folder beside it), never from the
    folder warm was started in."""
    if os.path.isabs(folder):
        return folder
    if not climbs(folder):
        return None
    import tempfile

    scratch = os.path.join(os.path.realpath(tempfile.gettempdir()), "scratch")
    return os.path.normpath(os.path.join(scratch, folder))


class HeldFolder:
    """A new private temporary folder (0700, `mkdtemp`'s) named `<prefix>...HELD`, its lock
    held while this process (or a child it forks without exec) lives; what dead processes
    left under `prefix` removed first; a process started with `fds` passed on holds it too.
    `remove` (or the finalizer: collected, or at exit) removes it in the process that made
    it; a forked child's only lets its descriptor go."""

    def __init__(self, prefix: str) -> None:
        import tempfile

        remove_orphans(prefix)
        self.path = tempfile.mkdtemp(prefix=prefix, suffix=HELD)
        fd = _locked(self.path)
        if fd is None:  # (no descriptor left, EMFILE; no `flock`): named as no orphan can be
            os.rmdir(self.path)
            self.path = tempfile.mkdtemp(prefix=prefix)
        self.fds = () if fd is None else (fd,)  # a process started may hold it too (`pass_fds`)
        self.made_by = os.getpid()  # (a forked child's copy is its parent's folder)
        self._known = None if fd is None else (fd, _identity(os.fstat(fd)))
        self.remove = weakref.finalize(self, _removed, self.path, self._known, self.made_by)

    def held(self) -> bool:
        """Whether no other process may remove it: its lock's descriptor still the folder's,
        at its path (a program that closed every descriptor, a daemon's `closerange`, let the
        lock go), or it was never named as held (no lock could be taken)."""
        if self._known is None:
            return True
        fd, identity = self._known
        try:
            return _identity(os.fstat(fd)) == identity == _identity(os.lstat(self.path))
        except OSError:
            return False


@contextmanager
def held_folder(prefix: str) -> Iterator[HeldFolder]:
    """A `HeldFolder` for the `with` block, removed at its end (in the process that made it)."""
    held = HeldFolder(prefix)
    try:
        yield held
    finally:
        held.remove()


def _identity(st: os.stat_result) -> tuple[int, int]:
    return st.st_dev, st.st_ino


def _removed(path: str, known: tuple[int, tuple[int, int]] | None, made_by: int) -> None:
    """The folder removed (by its maker), its descriptor closed if it is still the folder's
    (one a program closed, `closerange` in a daemon, may be another file's since); never
    unlocked: a forked child's copy shares its parent's lock."""
    if os.getpid() == made_by:
        import shutil

        shutil.rmtree(path, ignore_errors=True)
    if known is not None:
        fd, identity = known
        with contextlib.suppress(OSError):
            if _identity(os.fstat(fd)) == identity:
                os.close(fd)


def _locked(path: str) -> int | None:
    """A descriptor of the folder at `path` holding its exclusive `flock`; None where it
    cannot be taken (another holds it; no `flock`: a platform or file system without it)."""
    try:
        import fcntl

        flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_DIRECTORY", 0)
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
    except (ImportError, OSError):
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def remove_orphans(prefix: str) -> None:
    """Remove each held folder under `prefix` in the temporary folder that no living process
    holds (its lock taken here), of this user's, unchanged for `ORPHAN_AGE_S`."""
    import shutil
    import tempfile

    now = time.time()
    uid = os.getuid() if hasattr(os, "getuid") else None
    with contextlib.suppress(OSError), os.scandir(tempfile.gettempdir()) as entries:
        for entry in entries:
            if not (entry.name.startswith(prefix) and entry.name.endswith(HELD)):
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode) or now - st.st_mtime < ORPHAN_AGE_S:
                continue
            if uid is None or st.st_uid != uid:
                continue
            fd = _locked(entry.path)
            if fd is None:  # held: a living process's
                continue
            try:
                if os.path.samestat(os.fstat(fd), st):  # (the very folder looked at)
                    shutil.rmtree(entry.path, ignore_errors=True)
            finally:
                os.close(fd)
