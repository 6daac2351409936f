"""A temporary file made beside a bundle, in a folder others may write: made, never followed.

In a group-writable folder without the sticky bit (README's group-shared bundles) another member
may rename warm's temporary file away and put a link, or a file, in its place at any moment.
`made_exclusively` makes the file warm writes (`O_EXCL | O_NOFOLLOW`: a link or a file already at
the name is a one-line `BundleError`, never written through nor over) and `still_made` checks,
after SQLite connected by the name, that the file SQLite holds is that one, before it writes a
byte. State: none; it never prints, and removes nothing.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import TYPE_CHECKING

from warmcli.errors import DISK_FULL, BundleError

if TYPE_CHECKING:
    from pathlib import Path

TEMP_REPLACED = (  # `still_made`'s refusal
    "refused: warm's temporary file was replaced while it was written (another user's link "
    "or file put in its place); nothing was written through it"
)
_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def made_exclusively(tmp: str | Path, mode: int = 0o664) -> int:
    """A descriptor of the new file `tmp` (`mode` less the umask), made here: whatever is at
    that name already (a dead writer's file its caller did not remove, a planted link) is a
    `BundleError`, never followed nor taken over; so is a disk with no room for it (said so,
    as SQLite's refused writes are: `BundleError.disk_refusal`), or a folder one may not write."""
    try:
        return os.open(tmp, _FLAGS, mode)
    except OSError as exc:
        if exc.errno in (errno.EEXIST, errno.ELOOP):
            raise BundleError(
                f"{tmp}: cannot make it ({exc.strerror}): something else is at warm's "
                "temporary name; nothing was written"
            ) from None
        from warmcli.bundle.disk_full import cannot_open  # (a failure's words)

        full = exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC))
        why = f"{DISK_FULL}: nothing was written" if full else cannot_open(tmp)
        raise BundleError(f"{tmp}: {why} ({exc.strerror})") from None


def still_made(path: str | Path, made: os.stat_result, own: int = -1) -> None:
    """Refuse (`BundleError`) unless `path` still names the regular file `made` (no link
    put in its place) and, where `/proc/self/fd` lists this process's descriptors, one
    other than `own` holds that file: the connection just opened by `path` opened it, not
    a file a link planted there for a moment led to."""
    ident = (made.st_dev, made.st_ino)
    try:
        st = os.lstat(path)
        same = stat.S_ISREG(st.st_mode) and (st.st_dev, st.st_ino) == ident
    except OSError:
        same = False
    try:
        fds = os.listdir("/proc/self/fd") if same else []
    except OSError:
        fds = []  # no such listing here: the name checked is all there is
    if fds:
        same = False
        for fd in fds:
            with contextlib.suppress(OSError, ValueError):
                held = os.stat(f"/proc/self/fd/{fd}")
                if int(fd) != own and (held.st_dev, held.st_ino) == ident:
                    same = True
                    break
    if not same:
        raise BundleError(f"{path}: {TEMP_REPLACED}")
