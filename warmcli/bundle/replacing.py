"""Putting a finished file in place of a bundle: `warm merge`'s OUT, `warm pull`'s PATH.

`put_in_place(tmp, real)` renames `tmp` over `real` (the file itself, not a link to it)
in one atomic step; its caller holds the bundle's write lock. A crash journal that a
writer killed mid-write left beside `real` is the old file's, and SQLite plays a journal
into whichever file bears the name when it is next opened: the new file would be made
corrupt. So that journal is first rolled back into the old file (SQLite's own recovery,
which removes it: a reader of the old file meanwhile sees it whole), or removed where the
old file cannot be recovered (not writable, or no SQLite file). It owns no state and
never prints.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from warmcli.bundle.file import recover
from warmcli.errors import BundleError


def put_in_place(tmp: Path, real: Path) -> None:
    """Rename `tmp` over `real`, no crash journal of the old file left to be played into
    the new one."""
    journal = Path(f"{real}-journal")
    if journal.exists():
        with contextlib.suppress(BundleError, OSError, sqlite3.Error):  # then: removed
            recover(real)
        with contextlib.suppress(FileNotFoundError):  # recovered: SQLite removed it
            journal.unlink()
    os.replace(tmp, real)
