"""Comparing two bundles: kernels and tunes only in one of them, and picks that differ.

Kernels and tunes are matched by key (a kernel key is content-addressed, a tune
key names the operation, input shapes, device and candidate set), so "only in A"
means B would have to compile or tune it. For a tune key held by both, a differing
pick is reported with each bundle's pick and its median time. This module reads
both bundles and returns a `BundleDiff`; it never writes or prints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from warmcli.bundle import Bundle
from warmcli.records import KernelRecord, TuneRecord


@dataclass(frozen=True)
class PickChange:
    """One tune key whose pick differs between the two bundles, with the evidence."""

    operation: str
    shape: str
    device: str
    a_pick: str | None
    a_seconds: float | None
    b_pick: str | None
    b_seconds: float | None
    a_measured_at: float
    b_measured_at: float


@dataclass
class BundleDiff:
    a: str
    b: str
    kernels_only_a: list[KernelRecord] = field(default_factory=list)
    kernels_only_b: list[KernelRecord] = field(default_factory=list)
    tunes_only_a: list[TuneRecord] = field(default_factory=list)
    tunes_only_b: list[TuneRecord] = field(default_factory=list)
    picks_changed: list[PickChange] = field(default_factory=list)
    kernels_shared: int = 0
    tunes_shared: int = 0
    usage_a: dict[str, tuple[float, float]] = field(default_factory=dict)  # key: created, used
    usage_b: dict[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def same(self) -> bool:
        return not (
            self.kernels_only_a
            or self.kernels_only_b
            or self.tunes_only_a
            or self.tunes_only_b
            or self.picks_changed
        )


def pick_seconds(tune: TuneRecord) -> float | None:
    """The median time of the picked candidate, if it was measured."""
    return next((c.seconds for c in tune.candidates if c.name == tune.pick), None)


def diff_records(
    a: str,
    b: str,
    a_kernels: list[KernelRecord],
    b_kernels: list[KernelRecord],
    a_tunes: list[TuneRecord],
    b_tunes: list[TuneRecord],
) -> BundleDiff:
    """The difference of two bundles' records (pure: no file is read)."""
    diff = BundleDiff(a, b)
    a_k, b_k = {k.key: k for k in a_kernels}, {k.key: k for k in b_kernels}
    diff.kernels_only_a = [k for key, k in a_k.items() if key not in b_k]
    diff.kernels_only_b = [k for key, k in b_k.items() if key not in a_k]
    diff.kernels_shared = len(a_k.keys() & b_k.keys())
    a_t, b_t = {t.key: t for t in a_tunes}, {t.key: t for t in b_tunes}
    diff.tunes_only_a = [t for key, t in a_t.items() if key not in b_t]
    diff.tunes_only_b = [t for key, t in b_t.items() if key not in a_t]
    diff.tunes_shared = len(a_t.keys() & b_t.keys())
    for key, ta in a_t.items():
        tb = b_t.get(key)
        if tb is not None and ta.pick != tb.pick:
            diff.picks_changed.append(
                PickChange(
                    operation=ta.operation,
                    shape=ta.shape_key,
                    device=ta.device,
                    a_pick=ta.pick,
                    a_seconds=pick_seconds(ta),
                    b_pick=tb.pick,
                    b_seconds=pick_seconds(tb),
                    a_measured_at=ta.measured_at,
                    b_measured_at=tb.measured_at,
                )
            )
    return diff


def diff_bundles(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> BundleDiff:
    """What differs between the bundles at `a` and `b`; see the module doc."""
    with Bundle.open(a) as ba, Bundle.open(b) as bb:
        diff = diff_records(str(a), str(b), ba.kernels(), bb.kernels(), ba.tunes(), bb.tunes())
        diff.usage_a, diff.usage_b = ba.usage(), bb.usage()
        return diff
