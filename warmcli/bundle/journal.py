"""Whether SQLite may play the rollback journal beside a bundle.

SQLite rolls a hot journal back into its file on the next open that may write, and a
journal may name a super-journal (only a transaction over several attached databases
writes one; warm never makes such a transaction): once the rollback is done, SQLite
deletes the file that name gives, wherever it is, unless a journal names it back. So
whoever may write beside a bundle could have any file of the user's deleted.
`refuse_foreign` refuses, as a one-line `BundleError`, a journal that names one, is a
symbolic link or is no regular file: no write of warm's leaves such a journal.
`warmcli.bundle.file` calls it before every open of a bundle, and
`warmcli.bundle.replacing` before it puts a file in a bundle's place (it then removes
that journal unplayed). This module owns no state, never writes and never prints.
"""

from __future__ import annotations

import errno
import os
import stat

from warmcli.errors import BundleError

MAGIC = bytes.fromhex("d9d505f920a163d7")  # SQLite's journal magic, also the tail's
_TAIL = 16  # a super-journal's name ends the journal: its length, checksum and MAGIC


def refuse_foreign(path: str | os.PathLike[str]) -> None:
    """`BundleError` where the journal beside the file `path` leads to is not one a
    write of warm's leaves; nothing where it is, or where there is none."""
    journal = f"{os.path.realpath(path)}-journal"  # where SQLite keeps it
    why = _foreign(journal)
    if why:
        raise BundleError(
            f"{os.fspath(path)}: {os.path.basename(journal)} {why}: it is no journal of "
            "warm's and is not played; remove it"
        )


def _foreign(journal: str) -> str | None:
    try:
        fd = os.open(journal, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:  # none; or one SQLite cannot read either
        return "is a symbolic link" if exc.errno == errno.ELOOP else None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "is no regular file"
        tail = os.pread(fd, _TAIL, st.st_size - _TAIL) if st.st_size >= _TAIL else b""
    finally:
        os.close(fd)
    if tail[8:] == MAGIC and int.from_bytes(tail[:4], "big"):
        return "names another file for SQLite to delete (a super-journal)"
    return None
