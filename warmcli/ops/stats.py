"""A bundle's summary: what `warm stats` shows of a bundle too large to list entry by entry.

A bundle with more than `LARGE_KERNELS` kernels or `LARGE_TUNES` tunes is
summarised from SQL aggregates (`Bundle.aggregate`), never by reading every row:
kernels per device and arch with the bytes of their distinct blobs, tunes per
operation and device with how many are pending, and one line for each of only the
`SAMPLE_TUNES` tunes, a few of each operation. `warm stats --explain OPERATION` still
lists one operation's tunes with every candidate (its first `SAMPLE_EXPLAINED` on a
large bundle), and `--json` still has every entry. This module reads and presents; it
never writes the bundle and never prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Group

from warmcli.bundle.store import Bundle
from warmcli.cli.render import (
    EXPLAIN_HINT,
    add_row,
    candidates_table,
    contents_table,
    line,
    manifest_grid,
    natural,
    tunable_arch,
    tune_json,
    tune_order,
    tunes_table,
)
from warmcli.records import TuneRecord

LARGE_KERNELS = 1_000
LARGE_TUNES = 200
SAMPLE_TUNES = 20
SAMPLE_EXPLAINED = 100  # tunes of one operation shown with every candidate (`--explain`)


@dataclass(frozen=True)
class BundleSummary:
    """Counts of one bundle, by group, and the first few tunes."""

    manifest: dict[str, str]
    fingerprints: list[dict[str, Any]]
    kernels: list[tuple[str, str, int, int]]  # device, arch, kernels, blob bytes
    tunes: list[tuple[str, str, int, int]]  # operation, device, tunes, pending
    sample: list[TuneRecord]
    operation: str | None = None  # `--explain`: the tunes are this operation's only

    @property
    def kernel_count(self) -> int:
        return sum(n for *_, n, _ in self.kernels)

    @property
    def tune_count(self) -> int:
        return sum(n for *_, n, _ in self.tunes)


def is_large(counts: dict[str, int]) -> bool:
    return counts["kernels"] > LARGE_KERNELS or counts["tunes"] > LARGE_TUNES


def large_summary(path: Path, sample: int = SAMPLE_TUNES) -> BundleSummary | None:
    """The bundle's summary when it is too large to list, else None (list it whole)."""
    with Bundle.open(path) as bundle:
        return summarise(bundle, sample)


def summarise(
    bundle: Bundle, sample: int = SAMPLE_TUNES, operation: str | None = None
) -> BundleSummary | None:
    """`large_summary` of an open bundle; of one `operation`'s tunes only, if given (then
    its first `SAMPLE_EXPLAINED`)."""
    if not is_large(bundle.counts()):
        return None
    if operation is not None:
        sample = SAMPLE_EXPLAINED
    kernels, tunes, first = bundle.aggregate(sample, operation)
    if operation is not None:
        tunes = [t for t in tunes if t[0] == operation]
    return BundleSummary(bundle.manifest(), bundle.fingerprints(), kernels, tunes, first, operation)


def summary_renderable(path: str, summary: BundleSummary) -> Group:
    head = manifest_grid(path, summary.manifest, summary.fingerprints)
    add_row(head, "holds", f"{summary.kernel_count:,} kernels, {summary.tune_count:,} tunes")
    contents = contents_table()
    for device, arch, n, size in sorted(summary.kernels, key=lambda g: natural(g[:2])):
        add_row(contents, device, arch, f"{n:,}", f"{size:,}", "", "")
    for operation, device, n, pending in sorted(summary.tunes, key=lambda g: natural(g[:2])):
        add_row(
            contents,
            f"{operation} on {device}",
            tunable_arch(device),
            "",
            "",
            f"{n:,}",
            f"{pending:,}",
        )
    title = f"{len(summary.sample)} of {summary.tune_count:,} tunes"
    if summary.operation is None:
        shown = tunes_table(title, [tune_json(t) for t in sorted(summary.sample, key=tune_order)])
        return Group(head, contents, shown, line(EXPLAIN_HINT, style="dim"))
    every: list[Any] = []
    for t in sorted(summary.sample, key=tune_order):
        every += candidates_table(tune_json(t))
    more = f"{title} of {summary.operation} shown; all of them: warm stats --json"
    return Group(head, contents, *every, line(more, style="dim"))
