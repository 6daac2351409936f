"""The rollback journal beside a bundle: judged before SQLite is let near it, and removed
before a new bundle file replaces the one it belongs to.

SQLite rolls back a hot `-journal` on its first read of a database, before warm has checked
anything, and a journal handed over beside a bundle is as untrusted as the bundle. Three
kinds do harm outside the bundle: one that names a super-journal (SQLite deletes that file
once the rollback is done: any file the user may delete), one that is no regular file (a
FIFO, which SQLite's open waits on for ever, deaf to signals) and a hard link (one SQLite
finds no hot journal in, its first byte NUL, is written over by the next write: the other
name's file too). warm writes none of them (it attaches no database, so it never writes a
super-journal), nor a journal that is a symbolic link; and one another file's write left,
that file replaced by `mv` since, would play its pages into the new one (told where it holds
page 1: the file's change counter is neither that page's nor one more, `_foreign`).
`check_journal` refuses all, reading the journal's header, last 16 bytes and record heads,
without waiting, never opening one that is a link or no regular file (at each open, and by
`file.settle_journal` before each write of a bundle open since: a journal planted after). A
WAL bundle's `-wal` and `-shm`, which SQLite opens for writing when warm switches the bundle
back (it rewrites the `-shm` whole), are refused by `check_wal_files` when they are links (a
hard link too: its other name is another of the user's files) or no regular files; so are any
bundle's where a `-wal` is found (SQLite opens both then, whatever the file's header says).
A journal belongs to the file beside it, not to its name: `publish`, which moves a new bundle
into place, first removes the journal (and a `-wal` and `-shm`) of the file it replaces (SQLite
would play that file's old pages into the new one); `temp_beside` names the file a writer
makes for it (`.NAME.PID.tmp`, which `remove_leftovers` removes once its writer is dead).
Where this process may not write the bundle's folder (`may_write`), a journal is rolled back
by nobody here: `is_hot` asks SQLite whether it is hot, or a live writer's it reads past.
`after_refused_write` says whether a write the system refused left one to play back. It owns
no state; it never writes or rolls back a journal (SQLite rolls a sound journal back
into its own file).
"""

from __future__ import annotations

import contextlib
import os
import stat
from typing import TYPE_CHECKING

from warmcli.errors import BundleError
from warmcli.printable import Pattern

if TYPE_CHECKING:  # a serving process, which checks journals, imports no pathlib
    from pathlib import Path

JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")  # SQLite's; also ends a super-journal record
_TAIL = 16  # a super-journal record ends: name length, checksum (4 bytes each), the magic
_MAX_NAME = 512  # SQLite's unix VFS reads no longer super-journal name (mxPathname)
# What a `BundleError` says where SQLite could not open the bundle or its journal, and no
# other cause is found (`warmcli.bundle.disk_full.cannot_open`), or none can be looked for.
CANNOT_OPEN = "SQLite could not open the bundle or its journal (too many open files?)"


def check_journal(path: str | os.PathLike[str]) -> bool:
    """Refuse the bundle at `path` (a `BundleError` naming its journal) when the journal
    SQLite would roll back (beside the file a link names) names a super-journal, is a link
    or is no regular file; else whether there is one to roll back (False: none, an empty
    one, or one that cannot be read). The one look for a journal at each open of a bundle."""
    journal = f"{os.path.realpath(path)}-journal"
    try:
        why, size = _judged(journal)
    except OSError:
        return False  # none, or one SQLite cannot read either
    if why is None:
        return size > 0
    name = os.path.basename(journal)
    raise BundleError(f"{path}: refused: its journal {name} {why}; remove it to open the bundle")


def after_refused_write(path: str | os.PathLike[str]) -> str:
    """What a write the system refused (a full disk, a file size limit) left at `path`, as
    the end of its one line: nothing, where it was rolled back; else, where the rollback was
    refused too (`ulimit -f` below the file's size: the file's pages half written), that the
    bundle is whole only with the journal beside it, which the next open plays back."""
    journal = f"{os.path.realpath(path)}-journal"
    try:
        left = os.path.getsize(journal) > 0
    except OSError:
        left = False
    if not left:
        return "nothing was written, the bundle is unchanged"
    name = os.path.basename(journal)
    return (
        f"not rolled back (the rollback was refused too): the bundle is whole only with {name} "
        f"beside it, which the next warm to open it plays back (warm stats {path}, where the "
        "write is allowed); copy or cache the bundle only after that"
    )


def check_wal_files(path: str | os.PathLike[str], *, if_wal_found: bool = False) -> None:
    """Refuse the bundle at `path` (a `BundleError` naming the file) before SQLite opens its
    `-wal` and `-shm` for writing to switch a WAL bundle back: one that is a link (symbolic,
    or hard: SQLite would truncate and rewrite the file it shares, another of the user's) or
    no regular file. Each is judged by `lstat`, never opened; none at all is fine.
    `if_wal_found`: only where a `-wal` is there (SQLite then opens both at any open, even
    of a file whose header says no WAL: a read would rewrite a `-shm` hard link)."""
    real = os.path.realpath(path)
    if if_wal_found and not os.path.lexists(f"{real}-wal"):
        return
    for side in (f"{real}-wal", f"{real}-shm"):
        try:
            info = os.lstat(side)
        except OSError:
            continue  # none (SQLite makes its own), or none SQLite can reach either
        why = (
            "is a symbolic link"
            if stat.S_ISLNK(info.st_mode)
            else "is not a regular file"
            if not stat.S_ISREG(info.st_mode)
            else "is a hard link (it shares its content with another file)"
            if info.st_nlink > 1
            else None
        )
        if why is not None:
            name = os.path.basename(side)
            raise BundleError(f"{path}: refused: {name} {why}; remove it to open the bundle")


def _judged(journal: str) -> tuple[str | None, int]:
    """What is wrong with the journal at `journal` (None: nothing) and its size. One that
    is a link or no regular file is judged by `lstat`, never opened (opening a device acts:
    a tape rewinds, a watchdog is armed, a tty becomes the process's terminal)."""
    info = os.lstat(journal)
    if stat.S_ISLNK(info.st_mode):
        return "is a symbolic link", 0
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file", 0
    # Swapped since for a link or a FIFO: not followed, no wait, never a terminal.
    fd = os.open(journal, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return "is not a regular file", 0
        if info.st_nlink > 1:  # SQLite writes a journal in place: the other name's file too
            return "is a hard link (it shares its content with another file)", 0
        if _names_super_journal(fd, info.st_size):
            return "names another file for SQLite to delete (no warm write leaves one)", 0
        if (counters := _foreign(fd, info.st_size, journal[: -len("-journal")])) is not None:
            return (
                f"cannot be this file's (it restores page 1 of a file at change counter "
                f"{counters[0]}, this file is at {counters[1]}: a file moved in over one a "
                "write was interrupted in?)"
            ), 0
        return None, info.st_size
    finally:
        os.close(fd)


def _foreign(fd: int, size: int, db: str) -> tuple[int, int] | None:
    """Where the journal open at `fd` (`size` bytes) cannot be the file `db`'s: its page 1
    as it was before the write (a record of its first segment, its checksum sound) and the
    file's change counter (header offset 24), which a write transaction moves once, so the
    file holds that page's or one more; any other, with the journal the same one before
    and after reading the file (still there, not deleted by a live writer's commit, and its
    random nonce: no writer began another in it meanwhile), is another file's (both
    counters). None where that cannot be told (no such record, no file, a long scan)."""
    first = _page_one(fd, size)
    try:  # (no FIFO waited on: a file that is none is refused by its open)
        file = os.open(db, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return None
    try:
        header = os.pread(file, 28, 0) if stat.S_ISREG(os.fstat(file).st_mode) else b""
    finally:
        os.close(file)
    now = int.from_bytes(header[24:], "big")
    if first is None or len(header) < 28 or now in (first[1], (first[1] + 1) & 0xFFFFFFFF):
        return None
    if not _still_there(fd, f"{db}-journal"):  # committed meanwhile: the file moved on since
        return None
    return (first[1], now) if _page_one(fd, size) == first else None


def _still_there(fd: int, journal: str) -> bool:
    """Whether the journal open at `fd` is still the one at `journal`: a live writer's
    commit deletes it (SQLite's DELETE mode), and its next transactions move the file's
    counter on, while `fd` still reads the deleted one's page 1."""
    try:
        return os.fstat(fd).st_nlink > 0 and os.lstat(journal).st_ino == os.fstat(fd).st_ino
    except OSError:
        return False


_SCANNED = 4096  # journal records looked through for page 1's (a longer journal: not judged)


def _page_one(fd: int, size: int) -> tuple[int, int] | None:
    """The journal's nonce and its page 1's change counter, where its first segment (as
    SQLite plays it: a synced one's `nRec` records, else as many as its size holds) holds
    page 1 with a sound checksum; else None."""
    head = os.pread(fd, 28, 0)
    if len(head) < 28 or head[:8] != JOURNAL_MAGIC:
        return None
    n, nonce, _, sector, page = (int.from_bytes(head[i : i + 4], "big") for i in range(8, 28, 4))
    if not (512 <= page <= 65536 and 32 <= sector <= 65536) or page & (page - 1):
        return None
    record = 4 + page + 4
    count = (size - sector) // record if n in (0, 0xFFFFFFFF) else n
    for at in range(sector, sector + min(count, _SCANNED) * record, record):
        if os.pread(fd, 4, at) != b"\0\0\0\1":
            continue
        data = os.pread(fd, page + 4, at + 4)
        total = nonce + sum(data[i] for i in range(page - 200, 0, -200))  # SQLite's checksum
        if len(data) < page + 4 or total & 0xFFFFFFFF != int.from_bytes(data[page:], "big"):
            return None
        return nonce, int.from_bytes(data[24:28], "big")
    return None


def may_write(path: str | os.PathLike[str]) -> bool:
    """Whether this process may write the file at `path` and the folder SQLite's journal of
    it is in (that of the file a link names)."""
    folder = os.path.dirname(os.path.realpath(path))
    return os.access(path, os.W_OK) and os.access(folder, os.W_OK)


def is_hot(uri: str) -> bool:
    """Whether SQLite finds the journal beside the bundle at the read-only `uri` hot (to
    roll back: no live writer holds it) or cannot tell (another failure), asked without
    waiting by a read-only connection, which never plays a journal: a live writer's is
    not (SQLite reads past it, or waits for its commit)."""
    import _sqlite3  # (the C module: a serving process has it loaded already)

    conn = _sqlite3.connect(uri, uri=True, timeout=0.0, isolation_level=None)
    try:
        conn.execute("PRAGMA trusted_schema = OFF")
        conn.execute("PRAGMA schema_version").fetchone()  # a read: the header, no schema
    except _sqlite3.Error as exc:
        text = str(exc).lower()  # busy: a writer committing holds the lock, its journal live
        busy = isinstance(exc, _sqlite3.OperationalError) and ("locked" in text or "busy" in text)
        return not busy
    finally:
        conn.close()
    return False


def temp_beside(real: Path) -> Path:
    """The temporary file a writer of the bundle file `real` makes beside it, to `publish`."""
    return real.with_name(f".{real.name}.{os.getpid()}.tmp")


def publish(tmp: str | os.PathLike[str], real: str | os.PathLike[str]) -> None:
    """Move the new bundle file `tmp` into place at `real` (a file's own path, never a
    link), under `real`'s write lock: the journal a crashed writer of the file it replaces
    left (that file's, or one deleted since) is removed first, never rolled back into the
    new file; one that cannot be removed is a `BundleError` and nothing is replaced."""
    for left in (f"{real}-journal", f"{real}-wal", f"{real}-shm"):
        try:
            os.unlink(left)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise BundleError(
                f"{real}: cannot remove {os.path.basename(left)}, a journal left beside it "
                f"({exc.strerror}); nothing was replaced"
            ) from None
    os.replace(tmp, real)


def _names_super_journal(fd: int, size: int) -> bool:
    """Whether the journal ends in a super-journal record, as SQLite reads one (a name of
    1 to 512 bytes before the length; its checksum is not needed to refuse it)."""
    if size < _TAIL:
        return False
    tail = os.pread(fd, _TAIL, size - _TAIL)
    length = int.from_bytes(tail[:4], "big")
    return tail[8:] == JOURNAL_MAGIC and 0 < length <= min(_MAX_NAME, size - _TAIL)


_LEFTOVER = Pattern(r"([0-9]{1,9})\.(?:tmp|merge|merge\.[0-9]{1,9}\.tmp)(?:-journal|\.lock)?")


def unlink_all(*paths: Path) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # (this process's own pid: alive)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process
    return True


def remove_leftovers(path: Path) -> None:
    """Under `path`'s write lock: remove what a dead writer left beside it (beside a link's
    file): a create's `.NAME.PID.tmp`, a merge's `.NAME.PID.merge` (journal, lock, temporary)."""
    folder, base = os.path.split(os.path.realpath(path))
    lead = f".{base}."
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        stripped = name[1:] if name.startswith("..") else name
        if not stripped.startswith(lead):
            continue
        found = _LEFTOVER.fullmatch(stripped[len(lead) :])
        if found and not _alive(int(found[1])):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(folder, name))
