"""Vacuuming a cleaned bundle (`warmcli.ops.clean`): `vacuum` after a removal (a failed
write says the removal is kept, never that the bundle is as it was), and `freed_pages`,
whether a bundle a refused vacuum left holds enough free pages to vacuum it now. Nothing
here prints.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

from warmcli.bundle.file import _connect, _read_only_uri
from warmcli.bundle.store import Bundle
from warmcli.errors import BundleError

_FREE_PAGES = "SELECT * FROM pragma_freelist_count, pragma_page_count"


def vacuum(bundle: Bundle, kernels: int, tunes: int) -> None:
    """Vacuum the bundle once `kernels` and `tunes` were removed (committed): a failed write
    says they are removed and kept, never that the bundle is as it was."""
    try:
        bundle.vacuum()
    except BundleError as exc:
        why = exc.disk_refusal or str(exc)
        kept = (
            f"removed {kernels} kernel(s) and {tunes} tune(s) (kept), but "
            if kernels or tunes
            else ""
        )
        raise BundleError(f"{bundle.path}: {kept}the file was not vacuumed: {why}") from None


def freed_pages(path: Path) -> int:
    """The free pages of the bundle file (a refused vacuum's), read read-only, where they are
    a tenth of it or more (a vacuum rewrites it whole); 0 where unread, or where this process
    may not write the file or its folder (a read-only mount: no vacuum, and exit 0)."""
    if not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK | os.X_OK)):
        return 0
    try:
        with contextlib.closing(_connect(_read_only_uri(str(path)), uri=True)) as conn:
            free, pages = conn.execute(_FREE_PAGES).fetchone()
        return int(free) if int(free) * 10 >= int(pages) > 0 else 0
    except (sqlite3.Error, TypeError, ValueError):
        return 0
