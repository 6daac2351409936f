"""Cleaning a bundle: drop what this machine can never use, and evict to a size.

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
(compile-only, finished on any GPU later). `max_size` then evicts the least recently
used kernels until the binaries they need fit; a binary shared by a batch is freed
with its last kernel. The entries stream through the plan, which counts every removal by reason and
keeps the first `LISTED` whole (to show), and the keys to remove only when it is
to be applied: memory holds no whole table (a digest of each of this machine's
toolchain's builds, to judge what they supersede; `max_size` alone keeps the key,
blob and time of each kept kernel, to order them). `plan_clean` is pure;
`clean_bundle` applies a plan to a bundle file (in one transaction, then a vacuum; one
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

import contextlib
import dataclasses
import os
import sqlite3
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from warmcli.backends.machine import inventory
from warmcli.bundle.admin import _corrupt_blobs
from warmcli.bundle.consistency import require_consistent
from warmcli.bundle.file import FORMAT_VERSION, _connect, _read_only_uri, check_header
from warmcli.bundle.lock import write_lock
from warmcli.bundle.rows import AS_STORED
from warmcli.bundle.store import Bundle
from warmcli.bundle.unreadable import Unreadable, skip_unreadable, unreadable_error
from warmcli.errors import BundleError, CleanInterrupted
from warmcli.interrupted import held_interrupts
from warmcli.ops.exported import unexported
from warmcli.ops.foreign import Machine, kernel_foreign, local_builds, tune_foreign
from warmcli.printable import LISTED
from warmcli.records import KernelRecord, TuneRecord, where

UNEXPORTED = "its binary does not export its symbol"  # a host kernel never served
NOT_PTX = "its blob is not PTX of its arch"  # a CUDA PTX row never JIT-ed
NOT_CUBIN = "its blob is not a cubin of its arch"  # a CUDA cubin row holding PTX, say
OTHER_REASONS = "other reasons"  # where removals go once `LISTED` reasons are counted
CORRUPT_ROW = "corrupt: a malformed row"
WHATS = ("kernel", "tune")
_FREE_PAGES = "SELECT * FROM pragma_freelist_count, pragma_page_count"


@dataclass(frozen=True)
class Removal:
    """One entry a clean removes, and why."""

    kind: str  # "kernel" or "tune"
    key: str
    label: str  # as `warm stats` names it
    where: str
    reason: str
    bytes: int = 0  # what removing a kernel frees: its binary, if no kernel kept shares it
    by_rowid: bool = False  # a row no listing reads: removed by its rowid, not by `key`


@dataclass
class CleanPlan:
    removals: list[Removal] = field(default_factory=list)  # the first `LISTED`
    kept_unjudged: list[str] = field(default_factory=list)
    binary_bytes_before: int = 0
    binary_bytes_after: int = 0
    by_reason: Counter[str] = field(default_factory=Counter)  # every removal
    removed: Counter[str] = field(default_factory=Counter)  # by kind
    keys: dict[str, list[str]] | None = None  # by kind, every key to remove (when applied)

    def remove(self, removal: Removal) -> None:
        """Count one removal; keep it whole if it is among the first, its key if applied."""
        reason = removal.reason
        if reason not in self.by_reason and len(self.by_reason) >= LISTED:
            reason = OTHER_REASONS
        self.by_reason[reason] += 1
        self.removed[removal.kind] += 1
        if len(self.removals) < LISTED:
            self.removals.append(removal)
        if self.keys is not None and not removal.by_rowid:
            self.keys.setdefault(removal.kind, []).append(removal.key)


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

    @property
    def would_migrate(self) -> bool:
        """An older format left as it was (a dry run): a clean would migrate it."""
        return self.format_after == self.format_before < FORMAT_VERSION


def _lru(
    kept: list[tuple[float, str, str]],
    sizes: Mapping[str, int],
    max_size: int,
    plan: CleanPlan,
    labels: Callable[[str], KernelRecord | None],
    listed: dict[str, tuple[str, int]],
) -> set[str]:
    """Evict the least recently used of `kept` (last used, key, blob) until the blobs the
    rest use fit in `max_size`; the keys evicted. Kernels used at the same time (one run
    wrote them) go a blob at a time: a blob is freed only with its last kernel, and a tie
    broken by key would spread the evictions over every blob, freeing none."""
    users = Counter(sha for _, _, sha in kept)
    size = sum(sizes[sha] for sha in users)
    evicted: set[str] = set()
    for _, key, sha in sorted(kept, key=lambda e: (e[0], e[2], e[1])):
        if size <= max_size:
            break
        users[sha] -= 1
        if users[sha] == 0:
            size -= sizes[sha]
        evicted.add(key)
        k = labels(key) if len(plan.removals) < LISTED else None  # shown: named
        label, place = (k.label, where(k.device, k.arch)) if k else (key[:16], "")
        reason = f"least recently used (over {max_size:,} bytes)"
        if len(plan.removals) < LISTED:
            listed[key] = (sha, sizes[sha])
        plan.remove(Removal("kernel", key, label, place, reason, sizes[sha]))
    return evicted


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
) -> CleanPlan:
    """What a clean removes, and why (pure: each kernel with its last-used time, and each
    tune, streamed in; the plan out). `apply`: keep every key to remove; `labels` names
    a kernel evicted by `max_size` (by its key); `corrupt`: the sha256 of every blob
    that fails it, and why (its kernels are removed); `local`: `local_builds` of the
    kernels (else read from `kernels`, which is then read twice); `unserved`: the key of
    every kernel whose binary does not export its symbol, and why (removed as corrupt)."""
    if local is None:
        kernels = list(kernels)
        local = local_builds((k for k, _ in kernels), machine, corrupt or ())
    plan = CleanPlan(keys={} if apply else None)
    unjudged: Counter[str] = Counter()
    sizes: dict[str, int] = {}  # by blob: what every kernel uses
    kept_sizes: dict[str, int] = {}  # by blob: what the kept kernels use
    kept: list[tuple[float, str, str]] = []  # (last used, key, blob), for `max_size` only
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
        if max_size is not None:
            kept.append((last_used, k.key, k.sha256))
            if cannot:
                unjudged_of["kernel", k.key] = cannot
    picks: list[tuple[str, str, str, str]] = []  # kept tunes' (pick's kernel key, ...)
    for t in tunes:
        foreign, cannot = tune_foreign(t, machine)
        if cannot:
            unjudged[cannot] += 1
        label = f"{t.operation} {t.shape_key}"
        if foreign and not keep_foreign:
            plan.remove(Removal("tune", t.key, label, t.device, foreign))
        elif max_size is not None and t.pick is not None:
            pick = next((c.kernel_key for c in t.candidates if c.name == t.pick), "")
            picks.append((pick, t.key, label, t.device))
            if cannot:
                unjudged_of["tune", t.key] = cannot
    plan.binary_bytes_before = sum(sizes.values())
    plan.binary_bytes_after = sum(kept_sizes.values())
    staying = set(kept_sizes)
    if max_size is not None:
        evicted = _lru(kept, sizes, max_size, plan, labels, listed)
        gone = {("kernel", key) for key in evicted}
        for pick, key, label, device in picks:  # a pick no longer held: its tune goes too
            if pick in evicted:
                plan.remove(Removal("tune", key, label, device, "its pick's kernel evicted"))
                gone.add(("tune", key))
        for entry in gone & unjudged_of.keys():  # evicted: no longer kept
            unjudged[unjudged_of[entry]] -= 1
        in_use = {sha for _, key, sha in kept if key not in evicted}
        plan.binary_bytes_after = sum(sizes[sha] for sha in in_use)
        staying = in_use
    kept_unjudged = sorted((what, n) for what, n in unjudged.items() if n)
    plan.kept_unjudged = [f"kept {n} {what}: cannot judge" for what, n in kept_unjudged]
    _bytes_freed(plan, listed, staying)
    return plan


def _bytes_freed(plan: CleanPlan, listed: Mapping[str, tuple[str, int]], staying: set[str]) -> None:
    """Each listed kernel removal's `bytes`: what removing it frees. A binary a batch shares
    is freed by the last of its kernels to go (the others free nothing), never by one that
    stays, so the removals' bytes add up to `binary_bytes_before - binary_bytes_after`
    (when every removal is listed)."""
    freed: set[str] = set()
    for i in reversed(range(len(plan.removals))):
        r = plan.removals[i]
        if r.kind != "kernel" or r.key not in listed:
            continue
        sha, size = listed[r.key]
        gone = sha not in staying and sha not in freed
        freed.add(sha)
        plan.removals[i] = dataclasses.replace(r, bytes=size if gone else 0)


def clean_bundle(
    path: str | os.PathLike[str],
    machine: Machine | None = None,
    *,
    keep_foreign: bool = False,
    max_size: int | None = None,
    dry_run: bool = False,
    removed: list[int] | None = None,
) -> CleanReport:
    """Plan a clean of the bundle at `path` and, unless `dry_run`, apply it; `machine` is
    this machine's inventory (`Machine.of(inventory())`) unless given. `removed` (if given)
    holds the kernels and tunes removed as the removal commits (an interrupt held until it
    does): a caller interrupted however late reads what was kept there."""
    path = Path(path)
    if not path.exists():  # never create one: there is nothing to clean
        raise BundleError(f"{path}: no such bundle")
    before = path.stat().st_size
    format_before = check_header(path)[0]
    machine = machine or Machine.of(inventory())
    removed = [] if removed is None else removed  # kernels and tunes, once committed
    format_after = format_before
    try:
        with Bundle.open(path, write=not dry_run) as bundle:
            format_after = bundle.format_version()
            require_consistent(bundle)  # what its indexes say is what its rows say
            options = (machine, keep_foreign, max_size, dry_run)
            unreadable: list[Unreadable] = []  # rows no listing reads: met, skipped, removed
            try:
                plan = _plan(bundle, *options, unreadable)
            except BundleError as exc:  # a listing stopped at one: skip every one, plan again
                if not unreadable_error(exc):
                    raise
                unreadable = skip_unreadable(bundle)
                plan = _plan(bundle, *options, unreadable, True)
            applied = bool(plan.removals) and not dry_run
            if applied and plan.keys is not None:
                kernels, tunes = plan.keys.get("kernel", []), plan.keys.get("tune", [])
                with write_lock(path), held_interrupts():  # (a wait for it stops on Ctrl-C)
                    rows = tuple(
                        [(u.rowid, u.raw_key) for u in unreadable if u.what == w] for w in WHATS
                    )
                    bundle.delete(kernels, tunes, rows)
                    removed[:] = len(kernels) + len(rows[0]), len(tunes) + len(rows[1])
                _vacuum(bundle, *removed)
            elif not dry_run and _freed_pages(path):  # left by a vacuum refused (a full disk)
                removed[:] = 0, 0  # nothing removed: an interrupt from now says it is whole
                _vacuum(bundle, 0, 0)
        after = path.stat().st_size
        # made inside: a Ctrl-C landing as it is made (a call) is one after the removal too
        return CleanReport(path, plan, applied, dry_run, before, after, format_before, format_after)
    except BundleError as exc:  # after a migration (its own transaction, committed): say so
        if format_after == format_before:
            raise
        done = f"migrated from format {format_before} to {format_after} first, and stays so"
        raise BundleError(f"{exc}; the bundle was {done}") from None
    except KeyboardInterrupt:  # Ctrl-C once the removal is committed: it is kept, say so
        if not removed:
            raise
        raise CleanInterrupted(*removed) from None


def _plan(
    bundle: Bundle,
    machine: Machine,
    keep_foreign: bool,
    max_size: int | None,
    dry_run: bool,
    unreadable: list[Unreadable],
    scanned: bool = False,
) -> CleanPlan:
    """`plan_clean` of `bundle`, its malformed rows and `unreadable` removed as corrupt;
    unless `scanned`, a key no listing names a row by (not hex) has every unreadable row
    found (added to `unreadable`, skipped) and the plan made again. A listing that stops at
    an unreadable row not skipped is a `BundleError` (`unreadable_error`)."""
    corrupt = _corrupt_blobs(bundle)
    unserved = unexported(bundle)
    malformed: list[Removal | None] = []  # rows no reader can serve: removed, as corrupt
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
    )
    if None in malformed and not scanned:  # a key not hex: found, to be removed by rowid
        unreadable += skip_unreadable(bundle)
        return _plan(bundle, machine, keep_foreign, max_size, dry_run, unreadable, True)
    for removal in malformed:
        if removal is not None:
            plan.remove(removal)
    for u in unreadable:
        plan.remove(Removal(u.what, u.key, u.problem, "", CORRUPT_ROW, by_rowid=True))
    return plan


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


def _vacuum(bundle: Bundle, kernels: int, tunes: int) -> None:
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


def _freed_pages(path: Path) -> int:
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


def _unserved_why(k: KernelRecord) -> str:
    """Why `warmcli.ops.exported` names a kernel, as a removal's reason."""
    if k.backend != "cuda":
        return UNEXPORTED
    return NOT_PTX if k.arch.startswith("compute_") else NOT_CUBIN
