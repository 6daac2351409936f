"""Putting a finished file in place of a bundle: `warm merge`'s OUT, `warm pull`'s PATH.

`copy_into(source, target, force)` is `warm pull`'s copy of a fetched bundle into PATH,
under PATH's write lock, through a temporary file beside it (named as a create's, so the
next write removes one a killed pull left; PATH's group, mode and ACL kept,
`keep_attributes`, a new file 0664 less the umask); it counts what the bundle it replaces
held that the pulled one lacks (`replaced_only`: a production write-back's entries, say),
which `warm pull` says are gone. An interrupt that lands once the copy is moved into place
is held until its lock is let go, then raised as `PullInterrupted` with those counts: the
pull is kept (the counts are also appended to the caller's `done` before it is let go, for a
caller interrupted however late).
`looked_at` is PATH's (OUT's) stat, refused where it cannot be looked at.
`keep_attributes(tmp, kept, real)` gives the new file what the one it replaces has (a
group-shared bundle stays one: its group, mode and access ACL, its owner where this user may
give it), or says why it cannot, for the caller to refuse the replacing.
`put_in_place(tmp, real)` renames `tmp` over `real` (the file itself, not a link to it) in
one atomic step; its caller holds the bundle's write lock. A crash journal that a
writer killed mid-write left beside `real` is the old file's, and SQLite plays a journal
into whichever file bears the name when it is next opened: the new file would be made
corrupt. So that journal is first rolled back into the old file (SQLite's own recovery,
which removes it: a reader of the old file meanwhile sees it whole), or removed where the
old file cannot be recovered (not writable, no SQLite file, or a journal `check_journal`
refuses: never played) by `warmcli.bundle.journal.publish`, which refuses to replace
anything where it cannot remove it. `remove_new` takes away a bundle a failed first run
only created (under its write lock, and only while it holds nothing: another writer may
have stored into it meanwhile), or empties again the empty file it was given (`mktemp`'s,
`is_empty_file`); `new_or_nothing` does so for a merge or a pull into a new
bundle that fails or is interrupted (no `OUT.lock` left where no OUT was made, nor the
folder made for it, left empty). A `-wal`
(and its `-shm`) that a writer of a file switched to WAL mode left is removed there too:
SQLite plays a `-wal` into the file of that name whatever its header says, and no reader
of warm's reads the old file through one (it is switched back to a rollback journal
first). It owns no state and never prints.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import stat
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

from warmcli.bundle.file import (
    FORMAT_VERSION,
    OWN_CACHE,
    _connect,
    _read_only_uri,
    _validate,
    check_header,
    recover,
    unbounded,
)
from warmcli.bundle.journal import (
    check_journal,
    check_wal_files,
    publish,
    remove_leftovers,
    temp_beside,
)
from warmcli.bundle.lock import write_lock
from warmcli.errors import BundleError, PullInterrupted, RemoteError, WarmError
from warmcli.interrupted import held_interrupts


def put_in_place(tmp: Path, real: Path) -> None:
    """Rename `tmp` over `real`, no crash journal or `-wal` of the old file left to be
    played into the new one."""
    if os.path.lexists(f"{real}-journal"):
        with contextlib.suppress(BundleError, OSError, sqlite3.Error):  # then: removed
            recover(real)
    publish(tmp, real)  # what recovery left (or a journal SQLite may not play) is removed


def copy_into(
    source: Path, target: Path, force: bool, done: list[tuple[int, int]] | None = None
) -> tuple[int, int]:
    """Under the target's write lock: copy through a temporary file beside the file
    `target` leads to (a link stays one), renamed over it at the end; a file there that
    is no warm bundle is replaced only when `force`. The temporary file is named as a
    create's (`.NAME.PID.tmp`): one a killed pull left is removed by the next write. A PATH
    of this user's that it may not write (0444) is refused, as `warm merge` refuses such an
    OUT (another user's: `keep_attributes`). PATH
    keeps its group, mode and ACL (`keep_attributes`: else nothing is pulled); a new one
    is made 0664 less the umask (as a new bundle of `Bundle.create`), never 0600 nor
    writable by all.
    Returns how many kernels and tunes the bundle replaced held that `source` lacks
    (`replaced_only`), for the caller to say what the pull dropped; appended to `done` (if
    given) before a held interrupt is let go, for a caller interrupted however late."""
    if not force:  # first without the lock: a refusal leaves no `.lock` beside a file not warm's
        _refuse_no_bundle(target)
    try:  # as a merge's OUT's (`new_or_nothing` removes it again if nothing is made)
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RemoteError(f"{target}: cannot make its directory ({exc.strerror})") from None
    holding = contextlib.ExitStack()  # interrupts, held from the move into place on
    with holding:
        dropped = _copy_locked(source, target, force, holding)
        if done is not None:
            done.append(dropped)
        try:
            holding.close()  # an interrupt held since the copy was moved into place: delivered
        except KeyboardInterrupt:
            raise PullInterrupted(*dropped) from None
    return dropped


def _copy_locked(
    source: Path, target: Path, force: bool, holding: contextlib.ExitStack
) -> tuple[int, int]:
    """`copy_into`'s work under the lock; interrupts held in `holding` from the move on."""
    with write_lock(target):
        if not force:  # again under it: what a writer put there meanwhile
            _refuse_no_bundle(target)
        remove_leftovers(target)
        real = Path(os.path.realpath(target))
        tmp = temp_beside(real)
        was = f"{target} is as it was" if os.path.lexists(real) else f"no {target} was made"
        kept = looked_at(real, target, RemoteError, "nothing pulled")
        why = ""  # why PATH's attributes cannot be kept ("": they can, or none are there)
        if kept is not None and kept.st_uid == os.geteuid() and not os.access(real, os.W_OK):
            raise RemoteError(f"{target}: not writable by you: nothing pulled ({was})")  # 0444
        try:
            tmp.unlink(missing_ok=True)
            made = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o664)
            with os.fdopen(made, "wb") as out, open(source, "rb") as copy:
                if kept is not None:  # its group, mode, ACL (and owner where one may)
                    why = keep_attributes(tmp, kept, real)
                if not why:
                    shutil.copyfileobj(copy, out)  # into the file made here, never a link
            if not why:
                dropped = replaced_only(real, tmp)
                holding.enter_context(held_interrupts())  # moved and said, or neither
                put_in_place(tmp, real)
        except OSError as exc:  # a full disk, a size limit: said of PATH, not of warm's files
            tmp.unlink(missing_ok=True)
            why = exc.strerror or type(exc).__name__
            raise RemoteError(f"{target}: nothing pulled: {why} ({was})") from None
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if why and kept is not None:
            tmp.unlink(missing_ok=True)
            owner = f"belongs to {kept.st_uid}:{kept.st_gid}, and a pull by you {why}"
            raise RemoteError(f"{target}: {owner}; nothing pulled: pull as its owner ({was})")
    return dropped


ACL = "system.posix_acl_access"  # a file's access ACL, as Linux stores it (`setfacl`)


def keep_attributes(tmp: Path, kept: os.stat_result, real: Path) -> str:
    """Give `tmp` (this process's new file, to be renamed over `real`, whose stat is `kept`)
    the group, mode and access ACL `real` has, and its owner where this user may (root, or
    its own file): "", else why not ("cannot keep its owner and group"), where the group
    cannot be kept (this user is not in it) or the owner changing would take from the old
    owner what its group may not do (its mode gives its owner more than its group): then the
    caller leaves `real` as it is. A group-shared bundle (0664 in a 2775 folder, as Git's
    `core.sharedRepository` keeps one) rewritten by another member stays the fleet's: never
    the rewriter's group (a folder without the setgid bit gives a new file the rewriter's),
    nor without the ACL that let another user read it. With an ACL, what its group may do is
    its `group::` entry within its mask (the mode's group bits): a member it lets read only
    never takes the file over, nor does one who may not write it (0444: its owner's to chmod)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(tmp, flags)  # each change made to this file: a link put at `tmp` is ELOOP
    try:
        return _keep_attributes(fd, kept, real)
    finally:
        os.close(fd)


def _keep_attributes(fd: int, kept: os.stat_result, real: Path) -> str:
    """`keep_attributes`' work on the open file `fd` (never through a name)."""
    if os.fstat(fd).st_uid != kept.st_uid:
        with contextlib.suppress(PermissionError):  # root's: the owner kept too
            os.fchown(fd, kept.st_uid, kept.st_gid)
    now = os.fstat(fd)
    try:
        if now.st_gid != kept.st_gid:
            os.fchown(fd, -1, kept.st_gid)  # a group this user is in: allowed
    except PermissionError:
        return "cannot keep its owner and group"
    try:
        acl = os.getxattr(real, ACL)
    except OSError:  # none (ENODATA), or a file system without ACLs
        acl = None
    owners, groups = (kept.st_mode >> 6) & 7, (kept.st_mode >> 3) & 7  # with an ACL: its mask
    if now.st_uid != kept.st_uid and owners & ~groups:
        mode = stat.S_IMODE(kept.st_mode)
        return f"cannot keep its owner, to whom its mode 0{mode:o} gives more than to its group"
    if now.st_uid != kept.st_uid and acl is not None and owners & ~(groups & _group_entry(acl)):
        return "cannot keep its owner, to whom its ACL gives more than to its group"
    if now.st_uid != kept.st_uid and not os.access(real, os.W_OK):  # 0444: its owner's to chmod
        return "cannot keep its owner, and may not write it"
    if acl is not None:
        os.setxattr(fd, ACL, acl)
    os.fchmod(fd, stat.S_IMODE(kept.st_mode))  # after the ACL: its mask is the group's bits
    return ""


def _group_entry(acl: bytes) -> int:
    """What an access ACL's `group::` entry lets the owning group do (rwx bits; the mode's
    group bits are the ACL's mask, an upper bound only): Linux's xattr, a 4-byte version, then
    8-byte entries (tag, perm, id); 0 where it holds none (refused: nothing presumed)."""
    for at in range(4, len(acl) - 7, 8):
        tag, perm = struct.unpack_from("<HH", acl, at)
        if tag == 0x04:  # ACL_GROUP_OBJ
            return perm & 7
    return 0


def looked_at(
    path: Path, target: Path, refused: Callable[[str], WarmError], nothing: str
) -> os.stat_result | None:
    """`path`'s stat, None where nothing is there; one that cannot be looked at (a loop of
    links, a folder that may not be searched) is `refused` (`RemoteError`, `MergeError`),
    saying `target` and `nothing` (`nothing pulled`): `warm pull`'s PATH and `merge`'s OUT."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise refused(f"{target}: cannot look at it ({why}): {nothing}") from None


def replaced_only(old: Path, new: Path) -> tuple[int, int]:
    """How many kernels and tunes the bundle `old` holds that `new` lacks, by key, as a
    read-only open reads them (each file's schema never trusted): (0, 0) where there is no
    `old`, where the two are not both of this format (their keys are stored differently),
    or where either cannot be read so (a crash journal beside `old`, say, or a `-wal` or
    `-shm` that is a link: a WAL file's reader would write it, `check_wal_files`; a journal
    that is a FIFO, which SQLite's read-only open would wait on for ever, `check_journal`)."""
    query = (  # each old key looked up in the new file's primary key: memory flat
        "SELECT (SELECT count(*) FROM old.kernels o WHERE NOT EXISTS (SELECT 1 FROM "
        "main.kernels n WHERE n.key = o.key)), (SELECT count(*) FROM old.tunes o WHERE NOT "
        "EXISTS (SELECT 1 FROM main.tunes n WHERE n.key = o.key))"
    )
    try:
        if check_header(old)[0] != FORMAT_VERSION or check_header(new)[0] != FORMAT_VERSION:
            return 0, 0
        for path in (old, new):  # a view or trigger of a file's own never runs: each checked
            check_wal_files(path)  # a WAL file's reader writes its `-shm`: never a link
            check_journal(path)  # a FIFO: SQLite's look for a hot journal would wait for ever
            with contextlib.closing(_connect(_read_only_uri(path), uri=True)) as conn:
                _validate(path, conn, FORMAT_VERSION)
        with contextlib.closing(_connect(_read_only_uri(new), uri=True)) as conn:
            unbounded(conn)  # (both schemas checked above: a count may take millions of steps)
            conn.execute("ATTACH DATABASE ? AS old", (_read_only_uri(old),))
            for name in ("main", "old"):  # SQLite's page cache, never a file header's (`OWN_CACHE`)
                conn.execute(OWN_CACHE.replace("PRAGMA ", f"PRAGMA {name}."))
            kernels, tunes = conn.execute(query).fetchone()
            return int(kernels), int(tunes)
    except (BundleError, OSError, sqlite3.Error, TypeError, ValueError):
        return 0, 0


def _refuse_no_bundle(target: Path) -> None:
    """`RemoteError` where `target` exists and is no warm bundle (the header check that
    `warm merge` refuses its inputs by)."""
    try:
        check_header(target)
    except FileNotFoundError:
        return
    except (BundleError, OSError) as exc:
        why = f" ({exc.strerror})" if isinstance(exc, OSError) and exc.strerror else ""
        raise RemoteError(
            f"{target}: exists and is not a warm bundle{why}; nothing pulled: "
            "pass --force to replace it"
        ) from None


def is_empty_file(path: Path) -> bool:
    """Whether `path` is (or leads to) an empty regular file, as `mktemp` makes one: a run
    given it makes a new bundle there."""
    try:
        info = os.stat(path)
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size == 0


def remove_new(path: Path, *, was_empty: bool = False) -> None:
    """Remove a bundle a failed first run only created, and its lock file: under its write
    lock, and only while it holds no kernel and no tune (another run, or a production
    write-back, may have stored into it meanwhile: then both are kept). `was_empty`: the
    run was given an empty file there, which is emptied again, not removed."""
    real = os.path.realpath(path)  # through a link: the file it leads to, the link kept
    try:
        with write_lock(path):
            untouched = was_empty and is_empty_file(Path(real))  # not made a bundle yet
            if os.path.lexists(real) and not untouched and not _holds_nothing(real):
                return
            if was_empty:
                with contextlib.suppress(FileNotFoundError):
                    os.truncate(real, 0)
            else:
                Path(real).unlink(missing_ok=True)
            # under the lock: a writer that waited retakes a new file by its name (one let
            # go first was taken by a waiter, still named, as a newcomer made a new one)
            Path(f"{real}.lock").unlink(missing_ok=True)
    except BundleError:  # its lock cannot be taken: nothing is removed, nothing more said
        return


@contextlib.contextmanager
def new_or_nothing(path: Path) -> Iterator[None]:
    """What runs inside writes `path`: where no bundle was there before and it fails (or
    is interrupted), the lock file it left beside `path` is removed (`remove_new`), and
    `path`'s folder too where it was not there before and is left empty."""
    existed, folder = os.path.lexists(path), os.path.lexists(path.parent)
    try:
        yield
    except BaseException:
        if not existed:  # a clean-up that fails too (a working folder removed under warm:
            with contextlib.suppress(OSError):  # `realpath` fails) leaves the error it met
                remove_new(path)
        if not folder:
            with contextlib.suppress(OSError):  # not empty: another's file is in it
                path.parent.rmdir()
        raise


def _holds_nothing(real: str) -> bool:
    """Whether the bundle file `real` holds no kernel and no tune (False where it cannot
    be read so: it is kept), read as every read-only open connects (its schema's SQL never
    trusted, any name the file system takes)."""
    query = "SELECT EXISTS (SELECT 1 FROM kernels) OR EXISTS (SELECT 1 FROM tunes)"
    try:
        with contextlib.closing(_connect(_read_only_uri(real), uri=True)) as conn:
            return conn.execute(query).fetchone() == (0,)  # type: ignore[no-any-return]
    except sqlite3.Error:
        return False
