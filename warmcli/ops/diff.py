"""Comparing two bundles: kernels and tunes only in one of them, and picks that differ.

Kernels and tunes are matched by key (a kernel key is content-addressed, a tune
key names the operation, input shapes, device and candidate set), so "only in A"
means B would have to compile or tune it. For a tune key held by both, a differing
pick is reported with each bundle's pick and its median time; a kernel key held by both
whose rows name different blobs (`binaries_changed`: the key names the kernel's source,
not the bytes that run; a bundle from elsewhere may serve another binary under it) is
listed by key, and the bundles are not the same (a row corrupt in either is listed as
corrupt only: that bundle holds no binary for it). An entry a bundle holds but cannot read
(a malformed row, as `warm verify` names it) is reported as corrupt in that bundle, which
cannot serve it: two bundles are never called the same while one has any (a kernel whose
blob is missing, holds no binary or whose blob's size lies is one; `warm diff` then exits
1); a malformed row is listed there only, never as "only in" one bundle or as a changed pick
(past the first `LISTED` of a kind, whose rows are not read, it is counted there too), nor
counted in both, as a kernel with no blob is not (of the first `LISTED`
corrupt entries of each bundle). Both bundles' keys (and picks) are read as two streams
ordered by key and joined as they go, so memory does not grow with their size: a
`BundleDiff` counts everything and keeps the first `LISTED` entries of each kind, whose
rows alone are read whole (a tune kept as `listed_tune` makes it: no candidate but its
pick's, its candidates' names and kernels as a digest, and the listed kernels it names by
their candidates' names, as `warm stats` names them). A bundle whose SQL
indexes disagree with its rows is refused first (`warmcli.bundle.consistency`). This
module reads both bundles; it never writes or prints.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from warmcli.bundle.checking import TuneChecks, checked, keyed
from warmcli.bundle.compiles import Compile, blob_users_of, compiles_of
from warmcli.bundle.consistency import require_consistent
from warmcli.bundle.paired import joined
from warmcli.bundle.rows import AS_STORED
from warmcli.bundle.store import Bundle, BundleError
from warmcli.printable import LISTED
from warmcli.records import CandidateMeasurement, KernelRecord, TuneRecord

NAMED_CHARS = 16 << 20  # characters of the listed kernels' candidate names a diff holds
Reader = Callable[[str, str], Any]  # (kind, key) -> the record, read whole (None: malformed)


class Key(NamedTuple):
    """One entry as a diff first reads it: its key, and a tune's pick (a kernel's blob)."""

    key: str
    pick: object = None


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
    """What differs: the first `LISTED` entries of each kind, and how many there are."""

    a: str
    b: str
    kernels_only_a: list[KernelRecord] = field(default_factory=list)
    kernels_only_b: list[KernelRecord] = field(default_factory=list)
    tunes_only_a: list[TuneRecord] = field(default_factory=list)
    tunes_only_b: list[TuneRecord] = field(default_factory=list)
    picks_changed: list[PickChange] = field(default_factory=list)
    binaries_changed: list[str] = field(default_factory=list)  # kernel keys, blobs differ
    corrupt_a: list[str] = field(default_factory=list)  # what is wrong with each entry
    corrupt_b: list[str] = field(default_factory=list)
    kernels_shared: int = 0
    tunes_shared: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # by list name, all of them
    usage_a: dict[str, tuple[float, float]] = field(default_factory=dict)  # key: created, used
    usage_b: dict[str, tuple[float, float]] = field(default_factory=dict)
    users_a: dict[str, int] = field(default_factory=dict)  # sha256: the kernels sharing it
    users_b: dict[str, int] = field(default_factory=dict)
    compiles_a: dict[Compile, int] = field(default_factory=dict)  # the rows each compile made
    compiles_b: dict[Compile, int] = field(default_factory=dict)
    # a listed tune's candidates, of names and kernels, as a digest (`listed_tune`)
    candidate_kernels: dict[str, str] = field(default_factory=dict)
    # the tunable candidates each listed kernel is, of the listed tunes (`listed_tune`)
    named_a: dict[str, set[str]] = field(default_factory=dict)
    named_b: dict[str, set[str]] = field(default_factory=dict)
    named_chars: int = 0  # the characters of their names held (`NAMED_CHARS` at most)

    @property
    def same(self) -> bool:
        return not any(self.counts.values())

    @property
    def corrupt(self) -> bool:
        """Whether either bundle holds an entry it cannot serve."""
        return bool(self.count("corrupt_a") or self.count("corrupt_b"))

    def count(self, name: str) -> int:
        return self.counts.get(name, 0)

    def keep(self, name: str, entry: Callable[[], object]) -> None:
        """Count one entry of the list `name`; read it (`entry()`) and keep it if it is
        among the first `LISTED`. One `entry()` reads as None (a row its bundle cannot
        read, listed as corrupt there) is neither kept nor counted."""
        listed = getattr(self, name)
        if len(listed) < LISTED:
            record = entry()
            if record is None:
                return
            listed.append(record)
        self.counts[name] = self.counts.get(name, 0) + 1


def pick_seconds(tune: TuneRecord) -> float | None:
    """The median time of the picked candidate, if it was measured."""
    return next((c.seconds for c in tune.candidates if c.name == tune.pick), None)


def listed_tune(diff: BundleDiff, tune: TuneRecord | None, side: str) -> TuneRecord | None:
    """`tune`, of bundle `side`, as `diff` lists it: its pick's candidate alone, without its
    samples and reason (a tune's candidates may number 200,000, a reason inflate to 4 MiB from
    a row of 4 KB, and a diff lists 1,000 tunes), the set of its candidates' names and kernels
    kept as a digest in `diff.candidate_kernels` (what `checksum_twins` compares), and each
    candidate whose kernel that side lists as `operation/name` in `diff.named_<side>` (the
    first `LISTED` of a kernel's, as `warm stats` names it; `NAMED_CHARS` in all: names of
    4,096 characters deflate to nothing)."""
    if tune is None:
        return None
    named = diff.named_a if side == "a" else diff.named_b
    for c in tune.candidates:
        names = named.get(c.kernel_key)
        if names is not None and len(names) < LISTED and diff.named_chars < NAMED_CHARS:
            names.add(f"{tune.operation}/{c.name}")
            diff.named_chars += len(tune.operation) + len(c.name)
    pairs = sorted({(c.name, c.kernel_key) for c in tune.candidates})
    digest = hashlib.sha256(json.dumps(pairs).encode()).hexdigest()  # (ASCII: surrogates too)
    diff.candidate_kernels[tune.key] = digest
    p = next((c for c in tune.candidates if c.name == tune.pick), None)
    t, kept = (
        tune,
        () if p is None else (CandidateMeasurement(p.name, p.kernel_key, p.status, p.seconds),),
    )
    return TuneRecord(t.key, t.operation, t.shape_key, t.device, t.checksum, t.status,
                      t.pick, kept, t.seconds, t.measured_at)  # fmt: skip


def diff_keys(
    a: str,
    b: str,
    kernels: tuple[Iterable[Key], Iterable[Key]],
    tunes: tuple[Iterable[Key], Iterable[Key]],
    read: tuple[Reader, Reader],
) -> BundleDiff:
    """The difference of two bundles from their keys, each stream ordered by key; `read`
    gives an entry's record by its kind and key, in A and in B (pure: no file is read
    but through `read`)."""
    diff = BundleDiff(a, b)
    ra, rb = read
    shared = {"kernel": 0, "tune": 0}
    for kind, (xs, ys) in (("kernel", kernels), ("tune", tunes)):
        if kind == "tune":  # the kernels listed, named by the listed tunes' candidates
            diff.named_a = {k.key: set() for k in diff.kernels_only_a}
            diff.named_b = {k.key: set() for k in diff.kernels_only_b}
        for x, y in joined(xs, ys):
            if x is None or y is None:
                side, entry, reader = ("b", y, rb) if x is None else ("a", x, ra)
                assert entry is not None
                key = entry.key
                if kind == "tune":  # kept without its candidates
                    read_one = lambda r=reader, k=key, s=side: listed_tune(diff, r("tune", k), s)  # noqa: E731
                else:
                    read_one = lambda r=reader, k=key: r("kernel", k)  # noqa: E731
                diff.keep(f"{kind}s_only_{side}", read_one)
                continue
            shared[kind] += 1
            key = x.key
            if kind == "kernel":  # its blob's sha256 (None: a row listed as corrupt)
                if x.pick is not None and y.pick is not None and x.pick != y.pick:
                    diff.keep("binaries_changed", lambda k=key: k)
            elif x.pick != y.pick:
                diff.keep("picks_changed", lambda k=key: _change(ra("tune", k), rb("tune", k)))
    diff.kernels_shared, diff.tunes_shared = shared["kernel"], shared["tune"]
    return diff


def _change(ta: Any, tb: Any) -> PickChange | None:
    if ta is None or tb is None:  # a malformed row in either: corrupt there, no pick changed
        return None
    return PickChange(
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


def corrupt_entries(diff: BundleDiff, side: str, bundle: Bundle) -> set[tuple[str, str]]:
    """Count (and keep the first `LISTED` of) the entries of `bundle` that cannot be read,
    or served, as `corrupt_<side>`: every row read once, as `warm verify` reads them (a
    kernel's times too)
    (`checked`; the tunes of a large bundle in other processes, `TuneChecks`), in the order
    stored, and every kernel whose blob is missing (or no binary) or whose size lies (no blob is
    hashed: a blob that fails its sha256 only `warm verify` names). Returns the (kind, key)
    of the first `LISTED` malformed rows and kernels with no blob (not those whose blob's
    size lies: a blob's problem names no kernel)."""
    keys: set[tuple[str, str]] = set()

    def note(kind: str) -> Callable[[str], None]:
        return lambda key: None if len(keys) >= LISTED else keys.add((kind, key))

    tunes = TuneChecks(
        bundle, lambda bad: bundle.each_tune(on_error=bad, order=AS_STORED), note("tune")
    )
    try:
        used = bundle.each_kernel_used  # its times too, as `warm verify` and `warm stats` read
        kernels = checked(
            "kernel", lambda bad: used(on_error=keyed(bad, note("kernel")), order=AS_STORED)
        )
        blobs = (("", problem) for problem in bundle.blob_problems())
        for _, problem in itertools.chain(kernels, blobs, tunes):
            if problem is not None:
                diff.keep(f"corrupt_{side}", lambda p=problem: p)
    finally:
        tunes.close()
    for orphan in itertools.islice(bundle.each_orphan(), LISTED):
        note("kernel")(orphan.key)
    return keys


def _held(bundle: Bundle, kind: str, key: str) -> bool:
    """Whether `bundle` holds an entry of `kind` under `key` (a malformed one too)."""
    try:
        return (bundle.kernel(key) if kind == "kernel" else bundle.tune(key)) is not None
    except BundleError:
        return True


def _reader(bundle: Bundle) -> Reader:
    def read(kind: str, key: str) -> KernelRecord | TuneRecord | None:
        """The record, or None for a malformed row (`corrupt_entries` lists it)."""
        try:
            record = bundle.kernel(key) if kind == "kernel" else bundle.tune(key)
        except BundleError:
            return None
        if record is None:  # removed since its key was read
            raise BundleError(f"{bundle.path}: {kind} {key[:16]} was removed while being read")
        return record

    return read


def diff_bundles(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> BundleDiff:
    """What differs between the bundles at `a` and `b`; see the module doc."""
    # One read transaction each (`snapshot`): the tune checks' worker processes and this one
    # read the same state, no writer commits in between.
    with Bundle.open(a) as ba, Bundle.open(b) as bb, ba.snapshot(), bb.snapshot():
        require_consistent(ba)  # what their indexes say is what their rows say
        require_consistent(bb)

        def keys(bundle: Bundle, table: str) -> Iterator[Key]:
            return (Key(*row) for row in bundle.keys(table))

        diff = diff_keys(
            str(a),
            str(b),
            (keys(ba, "kernels"), keys(bb, "kernels")),
            (keys(ba, "tunes"), keys(bb, "tunes")),
            (_reader(ba), _reader(bb)),
        )
        corrupt = corrupt_entries(diff, "a", ba) | corrupt_entries(diff, "b", bb)
        for kind, key in corrupt:  # in both, but not served by both: not counted in both
            if _held(ba, kind, key) and _held(bb, kind, key):
                setattr(diff, f"{kind}s_shared", getattr(diff, f"{kind}s_shared") - 1)
            if kind == "kernel" and key in diff.binaries_changed:  # no binary there to differ
                diff.binaries_changed.remove(key)
                diff.counts["binaries_changed"] -= 1
        diff.usage_a = ba.usage_of([k.key for k in diff.kernels_only_a])  # the listed ones
        diff.usage_b = bb.usage_of([k.key for k in diff.kernels_only_b])
        diff.users_a = blob_users_of(ba, [k.sha256 for k in diff.kernels_only_a])  # as stats
        diff.users_b = blob_users_of(bb, [k.sha256 for k in diff.kernels_only_b])
        diff.compiles_a = compiles_of(ba, diff.kernels_only_a)  # a cubin's PTX: half each
        diff.compiles_b = compiles_of(bb, diff.kernels_only_b)
        return diff
