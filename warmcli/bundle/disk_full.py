"""What a `BundleError` says of a write the disk refused for want of room (`disk_full`): the
bundle's disk full (`warmcli.errors.DISK_FULL`), or, where SQLite keeps its temporary files on
another disk with less room, that folder and the variable that moves it; and of a file SQLite
could not open (`cannot_open`): the bundle's folder not writable, where it is not (no journal
can be made there: immutable, or a mount or policy that refuses it without EACCES), its disk
full, where no file can be made there (no free inode or block: SQLite's `CANTOPEN` keeps no
errno), its path too long, where it is longer than SQLite opens (`SQLITE_PATH_BYTES`; a
writer's temporary file beside it longer still), its file name too long, where its folder
takes no name as long as its journal's (`NAME-journal`), else descriptors run out. It owns no state,
never writes and never prints; it only asks the file system how much room is left and whether
a folder is writable."""

from __future__ import annotations

import os
from collections.abc import Callable

from warmcli.bundle.journal import CANNOT_OPEN, after_refused_write
from warmcli.errors import CANNOT_WRITE, DISK_FULL

UNWRITABLE = f"{CANNOT_WRITE}: its folder is not writable (for its journal)"
SQLITE_PATH_BYTES = 504  # the longest path SQLite's unix VFS opens: 512, less `-journal`'s room
JOURNAL_SUFFIX = "-journal"  # the name SQLite gives the rollback journal beside a bundle
TEMP_NAME_BYTES = 16  # what a writer's temporary file's name adds (`.NAME.PID.tmp`, `temp_beside`)


def cannot_open(path: str | os.PathLike[str]) -> str:
    """Why SQLite could not open the bundle at `path` or its journal (`SQLITE_CANTOPEN`): the
    journal is made beside the file a link names (`warmcli.bundle.file`), so its folder. A
    folder whose disk has no free inode (a tmpfs's `nr_inodes`, a small ext4's) or block left
    is full, said as every other full disk is: the journal was never made, nothing written."""
    folder = os.path.dirname(os.path.realpath(path))
    if not os.access(folder, os.W_OK):
        return UNWRITABLE
    if _no_room(folder):
        return f"{DISK_FULL} (no room for its journal): {after_refused_write(path)}"
    size = len(os.fsencode(os.path.realpath(path)))
    if size + TEMP_NAME_BYTES > SQLITE_PATH_BYTES:  # (SQLite says only "unable to open")
        return (
            f"its path is {size} bytes, too long for SQLite (a bundle's may be "
            f"{SQLITE_PATH_BYTES - TEMP_NAME_BYTES} bytes at most: SQLite's {SQLITE_PATH_BYTES} "
            "less what a temporary file's name beside it adds): name a shorter one"
        )
    name = len(os.fsencode(os.path.basename(os.path.realpath(path))))
    most = _name_max(folder)
    if name + len(JOURNAL_SUFFIX) > most:  # (an existing bundle: a new one's is refused first)
        return (
            f"its file name is {name} bytes, too long for its journal beside it (NAME"
            f"{JOURNAL_SUFFIX}: its folder takes names of {most} bytes at most): rename it, "
            f"{most - len(JOURNAL_SUFFIX)} bytes at most"
        )
    return CANNOT_OPEN


def _name_max(folder: str) -> int:
    """The longest file name `folder` takes, in bytes (255 where it cannot be asked)."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def _no_room(folder: str) -> bool:
    """Whether no file can be made in `folder`: its disk has no inode or no block left for
    this process (root's reserve counted for root). A file system that counts no inodes
    (`f_files` 0: btrfs) is judged by its blocks only, one that counts no blocks (`f_blocks`
    0: a tmpfs of `size=0`, unbounded; some FUSE ones) by its inodes only."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    root = os.geteuid() == 0
    inodes, blocks = (st.f_ffree, st.f_bfree) if root else (st.f_favail, st.f_bavail)
    return (st.f_files > 0 and inodes == 0) or (st.f_blocks > 0 and blocks == 0)


def disk_full(path: str | os.PathLike[str], temp: Callable[[], tuple[str, str]]) -> str:
    """`DISK_FULL`, of the bundle at `path`; or of `temp`'s folder, where SQLite keeps its
    temporary files (a sort too large for memory, a VACUUM's copy; `temp` says that folder and
    the variable that moves it: `warmcli.config.sqlite_temp_dir`) where that is on another
    disk with less room left, and under 64 MiB: a full TMPDIR is said so, not as the
    bundle's disk."""
    here = os.path.dirname(path) or "."
    tmp, variable = temp()
    try:
        mine, theirs = os.statvfs(here), os.statvfs(tmp)
        other = os.stat(tmp).st_dev != os.stat(here).st_dev
    except OSError:
        return DISK_FULL
    left = theirs.f_bavail * theirs.f_frsize  # (a quota on the bundle's disk: blamed there)
    if other and left < min(mine.f_bavail * mine.f_frsize, 64 << 20):
        room = f"set {variable} to a folder with room"
        return f"{DISK_FULL} where SQLite keeps its temporary files ({tmp}: {room})"
    return DISK_FULL
