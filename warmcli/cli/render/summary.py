"""How `warm stats` shows a bundle too large to list (`warmcli.ops.stats.BundleSummary`):
its manifest, its contents counted by SQL, and the few tunes read whole (each as the tables
show it, `tune_shown`, made as it was read). Pure
presentation over the summary (Rich imported when it is built); it owns no state, never
opens a bundle and never prints.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from warmcli.cli.render import add_row, line
from warmcli.cli.render.header import manifest_grid
from warmcli.cli.render.stats import (
    EXPLAIN_HINT,
    candidates_table,
    contents_table,
    tunable_row,
    tunes_table,
)
from warmcli.ops.stats import BundleSummary
from warmcli.printable import natural


def summary_renderable(path: str, summary: BundleSummary, copy: str | None = None) -> Iterator[Any]:
    """Its parts, each made as it is printed (`--explain`: a tune's table at a time, each
    of up to 1,000 candidates: 100 tunes' made at once, as one group, took 400 MB)."""
    fmt = summary.format_version
    head = manifest_grid(path, summary.manifest, summary.fingerprints, fmt, copy)
    add_row(head, "holds", f"{summary.kernel_count:,} kernels, {summary.tune_count:,} tunes")
    contents = contents_table()
    for device, arch, n, size in sorted(summary.kernels, key=lambda g: natural(g[:2])):
        add_row(contents, device, arch, f"{n:,}", f"{size:,}", "", "")
    for operation, device, n, pending in sorted(summary.tunes, key=lambda g: natural(g[:2])):
        tunable_row(contents, operation, device, f"{n:,}", f"{pending:,}")
    title = f"{len(summary.sample)} of {summary.tune_count:,} tunes"
    yield from (head, contents)
    if summary.operation is None:
        yield tunes_table(title, sorted(summary.sample, key=_order))
        yield line(EXPLAIN_HINT, style="dim")
        return
    for t in sorted(summary.sample, key=_order):
        yield from candidates_table(t)
    more = f"{title} of {summary.operation} shown; all of them: warm stats --json"
    yield line(more, style="dim")


def _order(t: dict[str, Any]) -> tuple[Any, ...]:
    """A sampled tune's place (its `tune_shown`): as `tune_order` places its record."""
    return (natural(t["operation"]), natural(t["shape"]), t["device"], t["key"])
