"""A file a key reads, as the per-process memos of what keys read know it: by its stat stamp.

A key reads the files a kernel's source and options reach (`warmcli.headers`,
`warmcli.precompiled`, `warmcli.linked`), each remembered for the rest of the process by its
`stamp` (size, inode, mtime and ctime: `touch -r` or `cp -p` set an mtime back, never a
ctime), only once `settled`: its mtime and its ctime more than `SETTLED_NS` past (a file
changed within one tick of a coarse clock may change again keeping its whole stamp; an mtime
ahead of the clock is taken as its ctime, `last_change`, as toolchains' racy checks take it).
`opened` opens only a regular file, never waiting on one a FIFO took the place of (`stat`, opened
without blocking, then `fstat`: the stamp of what was opened, not of what the path named a
moment before). `no_file` names what a compiler would open at a path that is no file (a FIFO
it waits on for ever, `/dev/zero` it reads until memory runs out); `compiler_opens`, whether a
compiler (or its linker) searching for a file takes it. It keeps no state and never raises for a
file it cannot read.
"""

from __future__ import annotations

import os
import stat
import time
from typing import BinaryIO

SETTLED_NS = 2_000_000_000
Stamp = tuple[int, int, int, int]  # size, inode, mtime and ctime (ns)


def stamp(st: os.stat_result) -> Stamp:
    """The stamp of the file `st` describes."""
    return st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns


def settled(st: os.stat_result) -> bool:
    """Whether the file `st` describes last changed (content or inode) over `SETTLED_NS` ago."""
    now = time.time_ns()
    return now - last_change(st.st_mtime_ns, st.st_ctime_ns, now) > SETTLED_NS


def last_change(mtime_ns: int, ctime_ns: int, now_ns: int) -> int:
    """When a file last changed, for a racy check at `now_ns`: the later of its mtime and
    ctime, but its ctime alone where its mtime is ahead of `now_ns`, set so (`touch -d 2100`,
    a tar made where the clock was ahead: a write dates both now), else it was never settled
    before the clock reached that date, and what it keys was found anew in every process."""
    return ctime_ns if mtime_ns > now_ns else max(mtime_ns, ctime_ns)


def opened(path: str) -> tuple[BinaryIO, os.stat_result] | None:
    """The regular file at `path`, open for reading, and its stat; None where there is none
    to read (missing, unreadable, a folder, a FIFO or a device: never opened where its path
    says so, as opening a device may act; never waited on where one came in its place)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode):
            return os.fdopen(fd, "rb"), st
    except OSError:
        pass
    os.close(fd)
    return None


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"))
_KINDS += ((stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def no_file(path: str) -> str:
    """What `path` leads to where a compiler would open it, and it is neither a regular file
    nor a folder (a compiler's search passes a folder by): "a FIFO", "a character device"...;
    "" for anything else, and for `/dev/null` (read empty: `#include "/dev/null"` compiles)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return ""
    kind = next((kind for test, kind in _KINDS if test(mode)), "")
    return kind if kind and os.path.realpath(path) != os.devnull else ""


def compiler_opens(path: str) -> bool:
    """Whether a compiler searching for a header takes `path`: a regular file, or no folder
    that is there (`no_file`'s, `/dev/null`); one `stat` for a file or none."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return False
    return stat.S_ISREG(mode) or (not stat.S_ISDIR(mode) and bool(no_file(path)))
