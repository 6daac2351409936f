"""Cleaning a bundle: drop what this machine can never use, and evict by age and to a size.

A kernel is *corrupt* when its blob is missing, fails its sha256, (a host kernel's) does not
export its symbol, (a CUDA PTX row's) is not PTX of its arch or (a cubin row's) not a cubin
of its arch (`warmcli.ops.exported`), and a kernel or tune when its row is malformed (as
`warm verify` names it): removed, so the next `warm run` builds it again; a row no listing
can read (`warmcli.bundle.unreadable`: a value over the length limit, a text not UTF-8, a
key not hex), once a listing meets one, has every such row found and skipped, the plan made
again, and each removed by its rowid.
An entry is *foreign* when this machine would never serve it
(`warmcli.ops.foreign`: a kernel whose binary runs on no device here, or that this
machine's toolchain's build, runnable here, supersedes; a tune of another device's).
What this machine cannot judge is kept and counted (`kept_unjudged`, less what `max_size`
evicts of it): kernels and tunes
of a backend whose devices it cannot list (CUDA without a GPU), and pending tunes
(compile-only, finished on any GPU later). `tunes` names tunables whose every tune is
removed (on every device), so that the next `warm run` measures them again; their kernels
are kept, and nothing foreign is removed beside them (as under `keep_foreign`); a name the
bundle holds no tune of is a `BundleError`, nothing removed. `older_than` then evicts what
was not used for that long, and `max_size` the least recently used kernels until the
binaries they need fit (`warmcli.ops.clean_age`; a PTX build used when its cubin is); a
binary shared by a batch is freed with its last kernel, a tune with its pick's kernel. The
entries stream through the plan, which counts every removal by reason and keeps the first
`LISTED` whole (to show), and the keys to remove only when it is to be applied: memory
holds no whole table (a digest
of each of this machine's toolchain's builds, to judge what they supersede; `max_size`
and `older_than` keep the key, blob and time of each kept kernel, and either the
keys of the tunes written before the age's cutoff or after now). `plan_clean` is pure;
`clean_bundle` applies a plan to a bundle file (made again under the write lock where
another writer committed since: a kernel it served is used now; in one transaction, then a
vacuum, `warmcli.ops.clean_vacuum`, and the stamp of what was used in the future; one
that removes nothing vacuums a file it may write, a tenth of it free pages); once
that transaction is committed (Ctrl-C, SIGTERM and SIGHUP held while it commits and is counted),
Ctrl-C is `CleanInterrupted` (the counts also in the caller's `removed`, for one
interrupted however late; 0 and 0 from a vacuum alone on) and a failed vacuum says so:
never "interrupted" or "unchanged" alone, as if nothing had been removed.
What this machine uses (`Machine`) comes from the one inventory,
`warmcli.backends.machine.inventory`, with the compilers the caller names. A bundle whose
SQL indexes disagree with its rows is refused before anything is read or removed
(`warmcli.bundle.consistency`). Nothing here prints.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from warmcli.backends.machine import inventory
from warmcli.bundle.admin import _corrupt_blobs
from warmcli.bundle.consistency import require_consistent
from warmcli.bundle.file import FORMAT_VERSION, check_header
from warmcli.bundle.lock import write_lock
from warmcli.bundle.rows import AS_STORED
from warmcli.bundle.store import Bundle
from warmcli.bundle.unreadable import Unreadable, skip_unreadable, unreadable_error
from warmcli.errors import BundleError, CleanInterrupted
from warmcli.interrupted import held_interrupts
from warmcli.ops.clean_age import (
    Kept,
    age_text,
    by_age,
    by_size,
    bytes_freed,
    clock_refused,
    old_and_future_tunes,
    stamp_future,
    used_with_cubins,
)
from warmcli.ops.clean_plan import CleanPlan, Removal
from warmcli.ops.clean_vacuum import freed_pages, vacuum
from warmcli.ops.exported import unexported
from warmcli.ops.foreign import Machine, kernel_foreign, local_builds, tune_foreign
from warmcli.printable import LISTED, cut, lone_surrogate, printable
from warmcli.records import KernelRecord, TuneRecord, where

UNEXPORTED = "its binary does not export its symbol"  # a host kernel never served
NOT_PTX = "its blob is not PTX of its arch"  # a CUDA PTX row never JIT-ed
NOT_CUBIN = "its blob is not a cubin of its arch"  # a CUDA cubin row holding PTX, say
CORRUPT_ROW = "corrupt: a malformed row"
NAMED = "named by --tune: measured again by the next warm run"
HELD_SHOWN = 10  # the operations a refused `tunes` name lists, of those the bundle holds
WHATS = ("kernel", "tune")


@dataclass
class CleanReport:
    path: Path
    plan: CleanPlan
    applied: bool
    dry_run: bool
    file_bytes_before: int
    file_bytes_after: int
    format_before: int = 0  # the file's format before the clean opened it
    format_after: int = 0  # and after (a write open migrates an older format)
    older_than: float | None = None  # seconds: what was not used for that long was evicted

    @property
    def would_migrate(self) -> bool:
        """An older format left as it was (a dry run): a clean would migrate it."""
        return self.format_after == self.format_before < FORMAT_VERSION


def plan_clean(
    kernels: Iterable[tuple[KernelRecord, float]],
    tunes: Iterable[TuneRecord],
    machine: Machine,
    *,
    keep_foreign: bool = False,
    max_size: int | None = None,
    apply: bool = True,
    labels: Callable[[str], KernelRecord | None] = lambda key: None,
    corrupt: Mapping[str, str] | None = None,
    local: Collection[bytes] | None = None,
    unserved: Mapping[str, str] | None = None,
    older_than: float | None = None,
    now: float = 0.0,
    tune_times: tuple[Collection[str], Collection[str]] = ((), ()),
    tunes_named: Collection[str] = (),
) -> CleanPlan:
    """What a clean removes, and why (pure: each kernel with its last-used time, and each
    tune, streamed in; the plan out). `apply`: keep every key to remove; `labels` names
    a kernel evicted by `max_size` (by its key); `corrupt`: the sha256 of every blob
    that fails it, and why (its kernels are removed); `local`: `local_builds` of the
    kernels (else read from `kernels`, which is then read twice); `unserved`: the key of
    every kernel whose binary does not export its symbol, and why (removed as corrupt);
    `older_than`: evict what was not used since `now - older_than` (`warmcli.ops.clean_age`:
    `tune_times`, the keys of the tunes written before then, and of those written after
    `now`, counted as used now by either eviction), before `max_size` evicts. `tunes_named`:
    operations whose every tune is removed."""
    if local is None:
        kernels = list(kernels)
        local = local_builds((k for k, _ in kernels), machine, corrupt or ())
    plan = CleanPlan(keys={} if apply else None)
    unjudged: Counter[str] = Counter()
    sizes: dict[str, int] = {}  # by blob: what every kernel uses
    kept_sizes: dict[str, int] = {}  # by blob: what the kept kernels use
    kept: Kept = []  # (last used, key, blob), for `max_size` and `older_than` only
    evicting = max_size is not None or older_than is not None
    future: set[str] = set()  # kept kernels used after `now`: taken as used at `now`
    ptx: dict[str, str] = {}  # kept PTX builds' symbols: used when their cubins are
    listed: dict[str, tuple[str, int]] = {}  # the listed kernel removals' (blob, size)
    unjudged_of: dict[tuple[str, str], str] = {}  # kept entries' `cannot`, for `max_size`
    for k, last_used in kernels:
        sizes[k.sha256] = k.size
        bad = corrupt.get(k.sha256) if corrupt else None
        bad = bad or (unserved.get(k.key) if unserved else None)
        foreign, cannot = (f"corrupt: {bad}", None) if bad else kernel_foreign(k, machine, local)
        if cannot:
            unjudged[cannot] += 1
        if foreign and (bad or not keep_foreign):
            if len(plan.removals) < LISTED:
                listed[k.key] = (k.sha256, k.size)
            plan.remove(Removal("kernel", k.key, k.label, where(k.device, k.arch), foreign, k.size))
            continue
        kept_sizes[k.sha256] = k.size
        if evicting:
            if now and last_used > now:  # a skewed or hostile clock: used now
                future.add(k.key)
            kept.append((min(last_used, now) if now else last_used, k.key, k.sha256))
            if k.arch.startswith("compute_"):
                ptx[k.key] = k.symbol
            if cannot:
                unjudged_of["kernel", k.key] = cannot
    picks: list[tuple[str, str, str, str]] = []  # kept tunes' (pick's kernel key, ...)
    held = {key for _, key, _ in kept} if older_than is not None else set()
    old, age = set(tune_times[0]), age_text(older_than or 0)
    for t in tunes:
        label = f"{t.operation} {t.shape_key}"
        if t.operation in tunes_named:
            plan.remove(Removal("tune", t.key, label, t.device, NAMED))
            continue
        foreign, cannot = tune_foreign(t, machine)
        if cannot:
            unjudged[cannot] += 1
        pick = next((c.kernel_key for c in t.candidates if c.name == t.pick), None)
        if foreign and not keep_foreign:
            plan.remove(Removal("tune", t.key, label, t.device, foreign))
        elif older_than is not None and t.key in old and (pick is None or pick not in held):
            plan.remove(Removal("tune", t.key, label, t.device, f"not used in the last {age}"))
            unjudged[cannot] -= bool(cannot)  # counted above, not kept after all
        elif evicting:
            plan.future["tune"] += t.key in tune_times[1]
            if pick is not None:
                picks.append((pick, t.key, label, t.device))
            if cannot:
                unjudged_of["tune", t.key] = cannot
    plan.binary_bytes_before = sum(sizes.values())
    plan.binary_bytes_after = sum(kept_sizes.values())
    staying = set(kept_sizes)
    if evicting:
        used_with_cubins(kept, ptx)
        evicted: set[str] = set()
        if older_than is not None:  # age first, then size
            evicted = by_age(kept, now - older_than, older_than, sizes, plan, labels, listed)
        if max_size is not None:
            evicted |= by_size(kept, sizes, max_size, plan, labels, listed)
        plan.future["kernel"] = len(future - evicted)
        gone = {("kernel", key) for key in evicted}
        for pick, key, label, device in picks:  # a pick no longer held: its tune goes too
            if pick in evicted:
                plan.remove(Removal("tune", key, label, device, "its pick's kernel evicted"))
                plan.future["tune"] -= key in tune_times[1]
                gone.add(("tune", key))
        for entry in gone & unjudged_of.keys():  # evicted: no longer kept
            unjudged[unjudged_of[entry]] -= 1
        in_use = {sha for _, key, sha in kept if key not in evicted}
        plan.binary_bytes_after = sum(sizes[sha] for sha in in_use)
        staying = in_use
    kept_unjudged = sorted((what, n) for what, n in unjudged.items() if n)
    plan.kept_unjudged = [f"kept {n} {what}: cannot judge" for what, n in kept_unjudged]
    bytes_freed(plan, listed, staying)
    return plan


def clean_bundle(
    path: str | os.PathLike[str],
    machine: Machine | None = None,
    *,
    keep_foreign: bool = False,
    max_size: int | None = None,
    dry_run: bool = False,
    removed: list[int] | None = None,
    older_than: float | None = None,
    tunes: Collection[str] = (),
) -> CleanReport:
    """Plan a clean of the bundle at `path` and, unless `dry_run`, apply it; `machine` is
    this machine's inventory (`Machine.of(inventory())`) unless given. `removed` (if given)
    holds the kernels and tunes removed as the removal commits (an interrupt held until it
    does): a caller interrupted however late reads what was kept there. `older_than`
    (seconds) evicts what was not used for that long, first. `tunes`: the operations whose
    every tune is removed, and only those (besides corrupt rows, and what `older_than` and
    `max_size` evict)."""
    path = Path(path)
    format_before = check_header(path, BundleError)[0]  # none is made: nothing to clean
    if refused := clock_refused(older_than, max_size, time.time()):
        raise BundleError(f"{path}: {refused}")
    before = path.stat().st_size
    machine = machine or Machine.of(inventory())
    removed = [] if removed is None else removed  # kernels and tunes, once committed
    format_after = format_before
    try:
        with Bundle.open(path, write=not dry_run) as bundle:
            format_after = bundle.format_version()
            require_consistent(bundle)  # what its indexes say is what its rows say
            _require_tunes(bundle, path, tunes)
            now = time.time()
            keep = keep_foreign or bool(tunes)
            options = (machine, keep, max_size, dry_run, (older_than, now), frozenset(tunes))
            seen = bundle._one(_DATA_VERSION)  # what other writers had committed
            plan, unreadable = _planned(bundle, options)
            applied = bool(plan.removals) and not dry_run
            if applied and plan.keys is not None:
                with write_lock(path):  # (a wait for it stops on Ctrl-C)
                    if bundle._one(_DATA_VERSION) != seen:  # a writer's since: planned anew
                        plan, unreadable = _planned(bundle, options)
                    keys = plan.keys or {}
                    kernels, tunes = keys.get("kernel", []), keys.get("tune", [])
                    rows = tuple(
                        [(u.rowid, u.raw_key) for u in unreadable if u.what == w] for w in WHATS
                    )
                    with held_interrupts():
                        bundle.delete(kernels, tunes, rows)
                        removed[:] = len(kernels) + len(rows[0]), len(tunes) + len(rows[1])
                vacuum(bundle, *removed)
            elif not dry_run and freed_pages(path):  # left by a vacuum refused (a full disk)
                removed[:] = 0, 0  # nothing removed: an interrupt from now says it is whole
                vacuum(bundle, 0, 0)
            if not dry_run and sum(plan.future.values()):  # ages from now on (kept)
                stamp_future(bundle, now)
        after = path.stat().st_size
        # made inside: a Ctrl-C landing as it is made (a call) is one after the removal too
        report = CleanReport(
            path, plan, applied, dry_run, before, after, format_before, format_after
        )
        return dataclasses.replace(report, older_than=older_than)
    except BundleError as exc:  # after a migration (its own transaction, committed): say so
        if format_after == format_before:
            raise
        done = f"migrated from format {format_before} to {format_after} first, and stays so"
        raise BundleError(f"{exc}; the bundle was {done}") from None
    except KeyboardInterrupt:  # Ctrl-C once the removal is committed: it is kept, say so
        if not removed:
            raise
        raise CleanInterrupted(*removed) from None


# Changed by every commit of another connection to the file (not this one's own): a writer's
# commit between the plan and the lock its removal takes (a kernel served, a row mended)
_DATA_VERSION = "PRAGMA data_version"
_Options = tuple[Machine, bool, int | None, bool, tuple[float | None, float], frozenset[str]]


def _planned(bundle: Bundle, options: _Options) -> tuple[CleanPlan, list[Unreadable]]:
    """`_plan` of `bundle` under `options`, and the rows no listing reads it met: a listing
    stopped at one has every one skipped (`skip_unreadable`) and the plan made again."""
    unreadable: list[Unreadable] = []  # rows no listing reads: met, skipped, removed
    try:
        return _plan(bundle, *options, unreadable), unreadable
    except BundleError as exc:
        if not unreadable_error(exc):
            raise
    unreadable = skip_unreadable(bundle)
    return _plan(bundle, *options, unreadable, True), unreadable


def _plan(
    bundle: Bundle,
    machine: Machine,
    keep_foreign: bool,
    max_size: int | None,
    dry_run: bool,
    age: tuple[float | None, float],
    named: frozenset[str],
    unreadable: list[Unreadable],
    scanned: bool = False,
) -> CleanPlan:
    """`plan_clean` of `bundle`, its malformed rows and `unreadable` removed as corrupt;
    unless `scanned`, a key no listing names a row by (not hex) has every unreadable row
    found (added to `unreadable`, skipped) and the plan made again. A listing that stops at
    an unreadable row not skipped is a `BundleError` (`unreadable_error`). `age`: evict what
    was not used for `age[0]` seconds (None: no age) before `age[1]`, the clean's time,
    which a last use in the future is taken as; `named`: the operations whose tunes go."""
    corrupt = _corrupt_blobs(bundle)
    unserved = unexported(bundle)
    malformed: list[Removal | None] = []  # rows no reader can serve: removed, as corrupt
    older_than, now = age
    no_times: tuple[set[str], set[str]] = (set(), set())
    cutoff = None if older_than is None else now - older_than  # (None: those ahead only)
    evicting = older_than is not None or max_size is not None
    tune_times = old_and_future_tunes(bundle, cutoff, now) if evicting else no_times
    kernels_used = bundle.each_kernel_used(_malformed("kernel", malformed), order=AS_STORED)
    plan = plan_clean(
        ((k, used) for k, (_, used) in kernels_used),
        bundle.each_tune(on_error=_malformed("tune", malformed), order=AS_STORED),
        machine,
        keep_foreign=keep_foreign,
        max_size=max_size,
        apply=not dry_run,
        labels=bundle.kernel,
        corrupt=corrupt,
        unserved={k.key: _unserved_why(k) for k, _ in unserved},
        local=local_builds(
            bundle.each_kernel(on_error=lambda *_: None, order=AS_STORED), machine, corrupt
        ),
        older_than=older_than,
        now=now,
        tune_times=tune_times,
        tunes_named=named,
    )
    if None in malformed and not scanned:  # a key not hex: found, to be removed by rowid
        unreadable += skip_unreadable(bundle)
        options = (machine, keep_foreign, max_size, dry_run, age, named)
        return _plan(bundle, *options, unreadable, True)
    for removal in malformed:
        if removal is not None:
            plan.remove(removal)
    for u in unreadable:
        plan.remove(Removal(u.what, u.key, u.problem, "", CORRUPT_ROW, by_rowid=True))
    return plan


def _require_tunes(bundle: Bundle, path: Path, tunes: Collection[str]) -> None:
    """Refuse a name in `tunes` the bundle holds no tune of (a typo removes nothing)."""
    for operation in tunes:
        if lone_surrogate(operation) or not bundle.has_operation(operation):
            names = bundle.operations(HELD_SHOWN + 1)
            held = ", ".join(printable(cut(n)) for n in names[:HELD_SHOWN])
            held += ", ..." if len(names) > HELD_SHOWN else ""
            shown = f"'{printable(cut(operation))}'"  # (a name of 100,000 characters: cut)
            raise BundleError(
                f"{path}: no tunes for operation {shown} (it holds: {held or 'none'})"
            )


def _malformed(kind: str, into: list[Removal | None]) -> Callable[[str, str], None]:
    """An `on_error` that adds each malformed row of `kind` to `into`, as a corrupt removal
    if its key is one warm writes (64 hex digits: the key its removal is made by), else as
    None (removed by its rowid, once found: `warmcli.bundle.unreadable`)."""

    def bad(key: str, problem: str) -> None:
        if len(key) == 64 and all(c in "0123456789abcdef" for c in key):
            into.append(Removal(kind, key, problem, "", CORRUPT_ROW))
        else:
            into.append(None)

    return bad


def _unserved_why(k: KernelRecord) -> str:
    """Why `warmcli.ops.exported` names a kernel, as a removal's reason."""
    if k.backend != "cuda":
        return UNEXPORTED
    return NOT_PTX if k.arch.startswith("compute_") else NOT_CUBIN
