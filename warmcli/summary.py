"""A bundle's summary: what `warm stats` shows of a bundle too large to list entry by entry.

A bundle with more than `LARGE_KERNELS` kernels or `LARGE_TUNES` tunes is
summarised from SQL aggregates (`Bundle.aggregate`), never by reading every row:
kernels per device and arch with the bytes of their distinct blobs, tunes per
operation and device with how many are pending, and one line for each of only the
first `SAMPLE_TUNES` tunes. `warm stats --explain OPERATION` still lists one
operation's tunes whole, and `--json` still has every entry. This module reads
and presents; it never writes the bundle and never prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from warmcli.bundle import Bundle
from warmcli.records import TuneRecord

LARGE_KERNELS = 1_000
LARGE_TUNES = 200
SAMPLE_TUNES = 20


@dataclass(frozen=True)
class BundleSummary:
    """Counts of one bundle, by group, and the first few tunes."""

    manifest: dict[str, str]
    fingerprints: list[dict[str, Any]]
    kernels: list[tuple[str, str, int, int]]  # device, arch, kernels, blob bytes
    tunes: list[tuple[str, str, int, int]]  # operation, device, tunes, pending
    sample: list[TuneRecord]

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
        if not is_large(bundle.counts()):
            return None
        kernels, tunes, first = bundle.aggregate(sample)
        return BundleSummary(bundle.manifest(), bundle.fingerprints(), kernels, tunes, first)


def _pick_line(t: TuneRecord) -> tuple[str, str]:
    """The pick's median and how much slower the runner-up is."""
    times = sorted(c.seconds for c in t.candidates if c.status == "ok" and c.seconds is not None)
    picked = next((c.seconds for c in t.candidates if c.name == t.pick), None)
    median = f"{picked * 1e6:,.1f} µs" if picked is not None else "-"
    runner = f"{times[1] / times[0]:.2f}×" if len(times) > 1 and times[0] > 0 else "-"
    return median, runner


def summary_renderable(path: str, summary: BundleSummary) -> Group:
    m = summary.manifest
    head = Table.grid(padding=(0, 2))
    head.add_row("bundle", path)
    head.add_row("format", f"{m.get('format_version')} (warm {m.get('warm_version')})")
    head.add_row("holds", f"{summary.kernel_count:,} kernels, {summary.tune_count:,} tunes")
    for fp in summary.fingerprints:
        head.add_row(str(fp["kind"]), str(fp["identity"]).split(":", 1)[-1])

    contents = Table(title="Contents", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("device / tunable", "arch", "kernels", "binary bytes", "tunes", "pending"):
        contents.add_column(col, justify="left" if col in ("device / tunable", "arch") else "right")
    for device, arch, n, size in summary.kernels:
        contents.add_row(device, arch, f"{n:,}", f"{size:,}", "", "")
    for operation, device, n, pending in summary.tunes:
        arch = device.split("|")[2] if device.count("|") >= 3 else device
        contents.add_row(f"{operation} on {device}", arch, "", "", f"{n:,}", f"{pending:,}")

    shown = Table(
        title=f"First {len(summary.sample)} of {summary.tune_count:,} tunes",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    for col in ("operation", "shape", "pick", "median", "runner-up", "candidates"):
        shown.add_column(col, justify="right" if col in ("median", "runner-up") else "left")
    for t in summary.sample:
        median, runner = _pick_line(t)
        shown.add_row(
            t.operation, t.shape_key, t.pick or t.status, median, runner, str(len(t.candidates))
        )
    hint = Text(
        "every candidate of one operation: warm stats --explain OPERATION; every entry: --json",
        style="dim",
    )
    return Group(head, contents, shown, hint)
