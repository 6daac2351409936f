"""A bundle's summary: what `warm stats` shows of a bundle too large to list entry by entry.

A bundle with more than `LARGE_KERNELS` kernels or `LARGE_TUNES` tunes is
summarised from SQL aggregates (`Bundle.aggregate`), never by listing every row:
kernels per device and arch with the bytes of their distinct blobs, tunes per
operation and device with how many are pending, and one line for each of only the
`SAMPLE_TUNES` tunes, a few of each operation. `warm stats --explain OPERATION` still
lists one operation's tunes with every candidate (its first `SAMPLE_EXPLAINED` on a
large bundle), and `--json` still has every entry. Every kernel row a listing of the
bundle would read (and, explaining one operation, each of its tunes) is still read and
checked, one at a time and none kept (`require_well_formed`): a malformed one is the
`BundleError` naming it, as the listing of a smaller bundle raises, whatever the count of
rows; the tunes of a summary are counted, each judged by `--json`, `--explain` and `warm
verify` (parsing 100,000 takes 1.5 s). `held_kernels` is which kernels the bundle holds
that one operation's candidates name (`--explain` lists those), never a key no kernel row
has. `read_once` reads every tune of a bundle small enough to list once, for all a listing
says of it (a listing read each tune's candidates twice, three times explaining one
operation). This module reads and returns data (`BundleSummary`, `held_kernels`, `read_once`);
`warmcli.cli.render.stats` presents it. It never writes the bundle, never builds output
and never prints.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from warmcli.bundle.consistency import require_well_formed
from warmcli.bundle.store import Bundle
from warmcli.printable import LISTED
from warmcli.records import TuneRecord

LARGE_KERNELS = 1_000
LARGE_TUNES = 200
SAMPLE_TUNES = 20
SAMPLE_EXPLAINED = 100  # tunes of one operation shown with every candidate (`--explain`)
LOOKED_UP = 500  # kernel keys a candidate names, looked up in the bundle at once


@dataclass(frozen=True)
class BundleSummary:
    """Counts of one bundle, by group, and the first few tunes."""

    manifest: dict[str, str]
    fingerprints: list[dict[str, Any]]
    kernels: list[tuple[str, str, int, int]]  # device, arch, kernels, blob bytes
    tunes: list[tuple[str, str, int, int]]  # operation, device, tunes, pending
    sample: list[Any]  # TuneRecords, or what `summarise`'s `shown` made of each as it was read
    operation: str | None = None  # `--explain`: the tunes are this operation's only
    format_version: int | None = None  # the file's own (its header's), not the manifest's claim

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
    bundle: Bundle, sample: int = SAMPLE_TUNES, operation: str | None = None, shown: Any = None
) -> BundleSummary | None:
    """`large_summary` of an open bundle; of one `operation`'s tunes only, if given (then
    its first `SAMPLE_EXPLAINED`); each sampled tune as `shown(tune)`, if given, made as it
    is read (a tune may hold 246,000 candidates: 100 of them held would take gigabytes)."""
    if not is_large(bundle.counts()):
        return None
    if operation is not None:
        sample = SAMPLE_EXPLAINED
    # What a listing of each row would say: of every kernel row; of the tunes, where one
    # operation's are explained (100,000 tunes take 1.5 s to parse: counted by SQL here).
    require_well_formed(bundle, operation, tunes=operation is not None)
    kernels, tunes, first = bundle.aggregate(sample, operation, shown)
    if operation is not None:
        tunes = [t for t in tunes if t[0] == operation]
    return BundleSummary(
        bundle.manifest(),
        bundle.fingerprints(),
        kernels,
        tunes,
        first,
        operation,
        bundle.format_version(),
    )


def held_kernels(bundle: Bundle, operation: str, listed: Container[str] | None) -> set[str]:
    """The keys of the kernels the bundle holds that `operation`'s candidates name: those in
    `listed` (the keys of every kernel a listing holds already), or, not given, those the
    bundle has a row for (looked up `LOOKED_UP` at a time). A key no kernel has is never
    kept: a tune may name 100,000 kernels, held by no bundle (200,000 such keys: 100 MB)."""
    ours: set[str] = set()
    asked: list[str] = []
    for t in bundle.each_tune(operation, on_error=lambda *_: None):
        for c in t.candidates:
            if listed is not None:
                ours.add(c.kernel_key) if c.kernel_key in listed else None
            elif c.kernel_key not in ours:
                asked.append(c.kernel_key)
                if len(asked) >= LOOKED_UP:
                    ours.update(bundle.usage_of(list(dict.fromkeys(asked))))
                    asked.clear()
    return ours | set(bundle.usage_of(list(dict.fromkeys(asked)))) if asked else ours


def read_once(
    bundle: Bundle,
    operation: str | None,
    listed: Container[str],
    named: dict[str, set[str]],
    convert: Callable[[TuneRecord], Any],
) -> tuple[list[Any], set[str]]:
    """Every tune of a bundle small enough to list, each read (its candidates unpacked)
    once, in `each_tune`'s order: (`convert` of each tune, `operation`'s only if given; the
    keys in `listed` those tunes' candidates name: `held_kernels`'), and the names of every
    tune's candidates that are a kernel `listed` added to `named` (`operation/name`, its
    first `LISTED` a kernel). Nothing is held a candidate but those names, as the listing
    that read them twice held. A malformed row names nothing; after the read,
    `each_tune(operation)` is read again only where one was skipped, so that one of
    `operation`'s (any, if none given) is the `BundleError` naming it, as a listing raises."""
    converted: list[Any] = []
    ours: set[str] = set()
    skipped = False

    def skip(*_: object) -> None:
        nonlocal skipped
        skipped = True

    for t in bundle.each_tune(on_error=skip):
        asked = operation is None or t.operation == operation
        for c in t.candidates:  # (the first `LISTED` of a kernel's: a row may hold 246,000)
            if c.kernel_key in listed:
                names = named.setdefault(c.kernel_key, set())
                names.add(f"{t.operation}/{c.name}") if len(names) < LISTED else None
                ours.add(c.kernel_key) if asked and operation is not None else None
        converted.append(convert(t)) if asked else None
        del t  # (not held while the next is made: a tune's may be 30 MB)
    if skipped:  # (the rows are those read: the caller holds the bundle's snapshot)
        for _ in bundle.each_tune(operation):
            pass
    return converted, ours
