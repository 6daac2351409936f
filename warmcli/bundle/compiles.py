"""Which kernel rows of a bundle one compile made, so a listing counts its time once.

A compile keeps each kernel's share of its time in every row it makes of that kernel
(`KernelRecord.seconds`: its group's time over the group's kernels): a CUDA compile that keeps
PTX makes two rows of one kernel, its cubin and its `compute_XX` PTX, each carrying the same
share. Those rows are told by what they have alike (`compile_of`: device, toolchain, the
kernel's content digest, its `components`' `kernel`, and that very share); another compile of
the same kernel, for another arch or by another toolchain, differs in one of them. A row
naming no content digest (one another tool wrote) is twin to none: its key stands in for it.
`shared_compiles` counts, in SQL (no row read into Python), the rows of every compile that
made more than one, streamed into a `SharedCompiles`: a private temporary SQLite file
(`connect("")`: SQLite removes it as it closes), each compile under its sha256, so a
listing streamed row by row gives each its part in one point query, and memory stays flat
(held in a dict, a bundle of 150,000 cubins with their PTX twins took `warm stats --json`
from 31 to 117 MB). Where that file cannot be made or written, a compile not kept there
counts as one row (its whole time: never a share too small). Reads only; it owns no state
beyond that file and never prints.
"""

from __future__ import annotations

import _sqlite3 as sqlite3  # as `warmcli.bundle.file`
import hashlib
from typing import TYPE_CHECKING

from warmcli.records import KernelRecord

if TYPE_CHECKING:
    from warmcli.bundle.rows import RowReader

Compile = tuple[str, str, str, float]  # (device, toolchain, kernel digest, seconds)

_SHARED = (  # (a digest as `compile_of` takes it: none, or "", is the row's key)
    "SELECT device, toolchain, coalesce(nullif(CASE WHEN json_valid(components) THEN "
    "json_extract(components, '$.kernel') END, ''), key), seconds, count(*) FROM kernels "
    "WHERE typeof(seconds) = 'real' GROUP BY 1, 2, 3, 4 HAVING count(*) > 1"
)


def compile_of(k: KernelRecord) -> Compile:
    """What the rows one compile made of one kernel have alike (see the module doc)."""
    digest = k.components.get("kernel", "")
    return (k.device, k.toolchain, k.key if digest == "" else str(digest), float(k.seconds))


def _digest(c: Compile) -> bytes:
    text = "\0".join((c[0], c[1], c[2], repr(c[3])))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class SharedCompiles:
    """How many rows each compile made of one kernel, where more than one (see the module
    doc): `get(compile, 1)` as a dict's."""

    def __init__(self) -> None:
        self._conn: sqlite3.Connection | None = None

    def put(self, compile: Compile, rows: int) -> None:
        try:
            if self._conn is None:
                self._conn = sqlite3.connect("")
                self._conn.execute("CREATE TABLE compiles (id BLOB PRIMARY KEY, n INTEGER)")
            self._conn.execute(
                "INSERT OR REPLACE INTO compiles VALUES (?, ?)", (_digest(compile), rows)
            )
        except sqlite3.Error:
            pass  # not kept: counted as one row (see the module doc)

    def get(self, compile: Compile, default: int = 1) -> int:
        if self._conn is None:
            return default
        try:
            row = self._conn.execute(
                "SELECT n FROM compiles WHERE id = ?", (_digest(compile),)
            ).fetchone()
        except sqlite3.Error:
            return default
        return default if row is None else int(row[0])


def shared_compiles(bundle: RowReader) -> SharedCompiles:
    """How many rows each compile made of one kernel, where it made more than one."""
    held = SharedCompiles()
    for device, toolchain, kernel, seconds, n in bundle._iter(_SHARED):
        held.put((str(device), str(toolchain), str(kernel), float(seconds)), int(n))
    return held
