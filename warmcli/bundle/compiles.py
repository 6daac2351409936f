"""Which kernel rows of a bundle one compile made, so a listing counts its time once.

A compile keeps each kernel's share of its time in every row it makes of that kernel
(`KernelRecord.seconds`: its group's time over the group's kernels): a CUDA compile that keeps
PTX makes two rows of one kernel, its cubin and its `compute_XX` PTX, each carrying the same
share. Those rows are told by what they have alike (`compile_of`: device, toolchain, the
kernel's content digest, its `components`' `kernel`, and that very share); another compile of
the same kernel, for another arch or by another toolchain, differs in one of them. A row
naming no content digest (one another tool wrote) is twin to none: its key stands in for it.
`shared_compiles` counts, in SQL (no row read into Python), the rows of every compile that
made more than one, streamed into a `warmcli.bundle.counts.HeldCounts` (a temporary file,
so memory stays flat: held in a dict, a bundle of 150,000 cubins with their PTX twins took
`warm stats --json` from 31 to 117 MB), so a listing streamed row by row gives each its
part; `blob_users_of` how many kernel rows share each of some binaries (a batch's), and
`compiles_of` how many rows each of some kernels' compiles made, for a listing of a few of
them (`warm diff`) to give each its share and its part of the compile's time as `warm
stats` does. Pure reads; it owns no state and never prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from warmcli.bundle.counts import HeldCounts
from warmcli.records import KernelRecord

if TYPE_CHECKING:
    from warmcli.bundle.rows import RowReader

Compile = tuple[str, str, str, float]  # (device, toolchain, kernel digest, seconds)

_COUNTS = (  # (a digest as `compile_of` takes it: none, or "", is the row's key)
    "SELECT device, toolchain, coalesce(nullif(CASE WHEN json_valid(components) THEN "
    "json_extract(components, '$.kernel') END, ''), key), seconds, count(*) FROM kernels "
    "WHERE typeof(seconds) = 'real'{} GROUP BY 1, 2, 3, 4"
)
_SHARED = _COUNTS.format("") + " HAVING count(*) > 1"


def compile_of(k: KernelRecord) -> Compile:
    """What the rows one compile made of one kernel have alike (see the module doc)."""
    digest = k.components.get("kernel", "")
    return (k.device, k.toolchain, k.key if digest == "" else str(digest), float(k.seconds))


def shared_compiles(bundle: RowReader) -> HeldCounts:
    """How many rows each compile made of one kernel, where it made more than one (by its
    `Compile`: `get(compile_of(k), 1)`)."""
    return HeldCounts(
        (
            ((str(device), str(toolchain), str(kernel), float(seconds)), int(n))
            for device, toolchain, kernel, seconds, n in bundle._iter(_SHARED)
        ),
        of=bundle.fspath,
    )


def blob_users_of(bundle: RowReader, shas: Sequence[str]) -> dict[str, int]:
    """How many kernel rows of `bundle` use each binary of `shas` (a listing's: bounded)."""
    found: dict[str, int] = {}
    for start in range(0, len(shas), 500):
        chunk = tuple(dict.fromkeys(shas[start : start + 500]))
        marks = ", ".join("?" * len(chunk))
        sql = f"SELECT sha256, count(*) FROM kernels WHERE sha256 IN ({marks}) GROUP BY sha256"
        found.update((str(sha), int(n)) for sha, n in bundle._all(sql, chunk))
    return found


def compiles_of(bundle: RowReader, kernels: Sequence[KernelRecord]) -> dict[Compile, int]:
    """How many rows of `bundle` each compile of `kernels` (a listing's: bounded) made, as
    `shared_compiles` counts them, so a listing of a few (`warm diff`) gives each its part."""
    ours = set(map(compile_of, kernels))
    found: dict[Compile, int] = {}
    seconds = sorted({c[3] for c in ours})
    for start in range(0, len(seconds), 500):
        chunk = tuple(seconds[start : start + 500])
        sql = _COUNTS.format(f" AND seconds IN ({', '.join('?' * len(chunk))})")
        for device, toolchain, kernel, spent, n in bundle._all(sql, chunk):
            made = (str(device), str(toolchain), str(kernel), float(spent))
            if made in ours:
                found[made] = int(n)
    return found
