"""Preflight: can this machine serve a bundle's entries, without running a workload?

For every device here, every kernel the bundle holds (for any arch) must have a build that runs on
that device by `warmcli.backends.serving`'s rule (arch, and the driver's CUDA version, which a
compile-only device is given by `warm check --driver`; any toolchain, the device's own preferred),
and the blob of that build must match its sha256 (a host build: be an ELF this machine's loader
takes, finding each library it needs, that exports the build's symbol, `warmcli.backends.host`; a
cubin row's: a cubin of its SM, not PTX). A kernel whose cubins are all for older architectures
than a GPU here, but whose PTX (`compute_XX`) that GPU's driver can JIT (`check_ptx`), is servable
and listed apart (`jit`): a slower first load, still no compile by warm. Every tune (operation,
shapes, candidate set) must have a measured pick on that device's fingerprint (a pending tune is
not servable). A kernel is counted once (`kernels`), its rows, a cubin or PTX each, in `builds`. The
cubins (tune records) for other archs only of an entry servable here are counted in `other` (the
cubins in `other_builds` too), never failing; those of an entry not servable here are not (it is
counted once, as not servable); entries of a backend with no device here (CUDA without a GPU or
`--arch`) in `unchecked`, never judged (one no warm serves: `device`, not servable); a malformed
entry is not servable (reason `corrupt`), nor a measured tune whose pick's kernel the bundle does
not serve (reason `absent`: production compiles it, or, its own build another, measures the tune
again; one point read per such tune) or whose build of it is another toolchain's (of this warm's
build recipe) that does not run here as its own, or, with no compiler, as the build it is served
(reason `toolchain`: production measures the tune again on the build it runs, as its kernel was
judged: `served_builds`), nor, under trusted keys, a row none of them signed, which production
never serves (reason `unsigned` where it was the build or record that device would have used).
`check_servable` returns each as a `MissExplanation` (the differing component, what the bundle has
against what this machine has; `on` the id of the device here it was judged for), in a `CheckReport`
(`warmcli.ops.check_report`, a listed kernel's source digest with it). The entries are streamed in
the order that groups one kernel's builds (one tune's devices) together, each group read once,
holding for each device here the build it would be served (its tune record) and the first `_NAMED`
archs (devices) to name: memory holds that, the first `LISTED` explanations and the counts, however
many builds one kernel has and whatever the bundle's size. It reads the bundle, hashes the blobs it
would serve (one over `MAX_LOADED_BYTES`, which serving refuses unread, is named so, unread) and
probes compilers; it never compiles, launches or prints. A bundle whose SQL indexes disagree with
its rows is refused first (`warmcli.bundle.consistency`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import replace

from warmcli.backends.base import COMPILE_ONLY, Device
from warmcli.backends.cuda.ptx import PtxError, check_ptx, not_cubin_of
from warmcli.backends.host.binary import exported_symbols, unloadable
from warmcli.backends.machine import DeviceInfo
from warmcli.backends.serving import SAME_PARTS, Target, choose, same_kernel, virtual_sm, why_not
from warmcli.backends.toolchain import BUILD_RECIPE, recipe_of
from warmcli.bundle.consistency import require_consistent
from warmcli.bundle.store import Bundle, BundleError
from warmcli.ops.check_report import CheckReport
from warmcli.ops.served_builds import UNKNOWN
from warmcli.records import KernelRecord, TuneRecord
from warmcli.runtime.explain import UNSIGNED, MissExplanation, explained

MACHINE = "this machine has"


# SQL orders streaming one kernel's builds (`same_kernel`, in `_SERVED_ORDER`: `choose` keeps the
# first of equals), one tune's devices (`_tune_group`), together (bad `components`: as empty).
_PART = "coalesce(CASE WHEN json_valid(components) THEN json_extract(components, '$.{}') END, '')"
_PARTS = ", ".join(map(_PART.format, SAME_PARTS))
KERNEL_GROUPS = f"backend, entry, label, {_PARTS}, device, arch, key"
TUNE_GROUPS = (
    "CASE WHEN instr(device, '|') > 0 THEN substr(device, 1, instr(device, '|') - 1) "
    "ELSE device END, operation, shape_key, checksum"
)
_SERVED_ORDER = "device, arch, label, key"  # production's order of a kernel's builds
_BLOBS_HELD = 4096  # blob verdicts remembered (a batch's blob serves many kernels)
# sha256 (PTX's: its arch, the device's) -> (why not servable, "" if it is; a host binary's names).
Blobs = dict[str, tuple[str, frozenset[str] | None]]
_NAMED = 64  # archs of one kernel's builds (devices of one tune) named in why not servable


def _tune_group(t: TuneRecord) -> tuple[str, ...]:
    return (t.device.split("|", 1)[0], t.operation, t.shape_key, t.checksum)


def _arch_of(fingerprint: str) -> str:
    parts = fingerprint.split("|")
    return parts[2] if len(parts) > 2 else ""


def check_servable(bundle: Bundle, devices: Sequence[Device], driver: str = "") -> CheckReport:
    """Every entry of `bundle` that a device here would use and cannot be served, and why.

    For each device here, each kernel the bundle holds (for any arch) must have a build
    that runs on it (`warmcli.backends.serving`) whose blob matches its sha256 (PTX: that its
    driver can JIT), and each tune a measured pick on its fingerprint. The builds of a
    servable entry that only other machines use are counted in `other`, the entries of a
    backend with no device here in `unchecked`, neither failing. `driver` (a CUDA release
    such as `13.0`) stands for the driver of CUDA devices that have none here (`--arch`).
    """
    offers = [DeviceInfo.of(d) for d in devices]
    if driver:  # the fleet's driver, stated for compile-only CUDA devices (`--arch`)
        offers = [replace(o, driver=driver) if o.name == COMPILE_ONLY else o for o in offers]
    require_consistent(bundle)  # what its indexes say is what its rows say
    report = CheckReport(bundle.path, offers)
    blobs: Blobs = {}  # sha256 -> why its blob cannot be served ("" when it can), its names
    kernels = bundle.each_kernel(on_error=report.corrupt("kernel"), order=KERNEL_GROUPS)
    for _, builds in itertools.groupby(kernels, same_kernel):
        _check_kernels(bundle, builds, offers, report, blobs)
    tunes = bundle.each_tune(on_error=report.corrupt("tune"), order=TUNE_GROUPS)
    for _, same_tune in itertools.groupby(tunes, _tune_group):
        _check_tunes(bundle, same_tune, offers, report)
    return report


def _unsigned(bundle: Bundle, record: KernelRecord | TuneRecord) -> bool:
    """Under trusted keys: whether no trusted key signed `record`'s row, which production
    then never serves (`Bundle.kernel` and `Bundle.tune` read it as absent)."""
    if bundle.covered is None:
        return False
    if isinstance(record, KernelRecord):
        return bundle.kernel(record.key) is None
    return bundle.tune(record.key) is None


def _unsigned_miss(kind: str, key: str, label: str) -> MissExplanation:
    return MissExplanation(kind, key, label, "unsigned", UNSIGNED, ("unsigned",))


def _blob_problem(bundle: Bundle, record: KernelRecord, blobs: Blobs, offer: DeviceInfo) -> str:
    """Why the blob of `record` cannot be served on `offer` ("" when it can): missing or failing
    its sha256, PTX its driver cannot JIT, a cubin row's no cubin of its SM, a host binary needing
    a library the loader lacks or not exporting its symbol (each blob read once, verdict kept)."""
    ptx = virtual_sm(record.arch) is not None
    held = record.sha256 + (f" {record.arch} {offer.id} {offer.arch} {offer.driver}" if ptx else "")
    if (cached := blobs.get(held)) is None:
        symbols = None
        try:
            data = bundle.blob(record.sha256)
            if ptx:
                problem = check_ptx(data, offer.arch, offer.driver) or ""
            elif offer.backend == "host":
                problem = unloadable(data)
                symbols = None if problem else exported_symbols(data)
            else:  # a cubin row's blob: a cubin of its SM (not PTX, not another SM's)
                problem = not_cubin_of(data, record.arch) or ""
        except BundleError as exc:
            problem = f"bundle's build: {exc}"
        except PtxError as exc:
            problem = f"bundle has {record.arch} PTX for it, which {offer.id} cannot JIT: {exc}"
        if len(blobs) >= _BLOBS_HELD:
            blobs.clear()
        cached = blobs[held] = (problem, symbols)
    problem, symbols = cached
    if not problem and symbols is not None and record.symbol not in symbols:
        return (
            f"bundle's build does not export {record.symbol}: its binary (blob "
            f"{record.sha256[:16]}) has no such dynamic symbol, so serving it would miss"
        )
    return problem


def _check_kernels(
    bundle: Bundle,
    builds: Iterator[KernelRecord],
    offers: list[DeviceInfo],
    report: CheckReport,
    blobs: Blobs,
) -> None:
    """One kernel's builds (every arch and toolchain) against every device here, read once:
    memory holds, for each device, the build `choose` picks so far and the first that
    fails for more than its arch (a cubin's before its PTX's), and the first `_NAMED` archs
    the builds are for."""
    first = next(builds)
    report.kernels += 1
    here = [o for o in offers if o.backend == first.backend]
    targets = [Target(o.backend, o.arch, o.driver, o.toolchain) for o in here]
    archs = {o.arch for o in here}
    chosen: list[KernelRecord | None] = [None] * len(here)
    unfit: list[tuple[KernelRecord, tuple[str, str]] | None] = [None] * len(here)
    unsigned: list[KernelRecord | None] = [None] * len(here)  # one that ran there, unsigned
    held: dict[str, bool] = {}  # arch -> a cubin's (not PTX), in the order met
    other = 0  # cubins for no arch here: counted in `report.other` if the kernel is servable
    for k in itertools.chain((first,), builds):
        cubin = virtual_sm(k.arch) is None
        report.builds += 1
        if not here:  # no device of its backend here: not judged, never failing
            report.skip("kernel", k.key, k.label, k.backend, k.arch, k is first)
            continue
        other += cubin and k.arch not in archs  # a build here serves is for an arch here
        if k.arch in held or len(held) < _NAMED:
            held[k.arch] = cubin
        if _unsigned(bundle, k):  # never served: no build for any device here
            for i, target in enumerate(targets):
                if unsigned[i] is None and why_not(k, target) is None:
                    unsigned[i] = k
            continue
        for i, target in enumerate(targets):
            best = chosen[i]
            if best is None:  # `choose` of one build: it, where it runs on the target
                why = why_not(k, target)
                if why is None:
                    chosen[i] = k
                elif why[0] != "arch" and (unfit[i] is None or (cubin and _ptx(unfit[i]))):
                    unfit[i] = (k, why)  # a cubin's reason first: the build a GPU takes first
            elif best.arch != target.arch or best.toolchain != target.toolchain:
                chosen[i] = choose([best, k], target, _any)  # else `choose` keeps the first
    served = True  # by every device here: only then are its other builds counted as others
    for o, target, pick, misfit, left in zip(here, targets, chosen, unfit, unsigned, strict=True):
        if o.toolchain is None:  # what a tune's pick of it is served here, for `_pick_served`
            report.served_by.put((o.fingerprint, *same_kernel(first)), pick and pick.toolchain)
        if pick is None:
            why = _unrunnable(first, misfit, target, sorted(held))
            if left is not None:
                why = _unsigned_miss("kernel", left.key, left.label)
            report.refuse(why.on(o.id), left or (misfit[0] if misfit else first))
            served = False
        else:
            served = _served(bundle, pick, o, report, blobs, held) and served
    if served:
        report.other += other
        report.other_builds += other


def _any(_: KernelRecord) -> bool:
    return True


def _ptx(unfit: tuple[KernelRecord, tuple[str, str]] | None) -> bool:
    """Whether the build whose reason `unfit` holds is PTX (`compute_XX`), whose reason a
    cubin's replaces: a driver a cubin needs is older than its PTX's (`12.x`, not `12.8`)."""
    return unfit is not None and virtual_sm(unfit[0].arch) is not None


def _served(
    bundle: Bundle,
    chosen: KernelRecord,
    o: DeviceInfo,
    report: CheckReport,
    blobs: Blobs,
    held: dict[str, bool],
) -> bool:
    """The build `chosen` to serve on `o`: refused if its blob cannot be (False), listed if
    PTX (`held`: the archs of the kernel's builds, each True where a cubin)."""
    problem = _blob_problem(bundle, chosen, blobs, o)
    ptx = chosen.arch != o.arch
    if problem:
        reason = "ptx" if ptx and not problem.startswith("bundle's build") else "binary"
        why = MissExplanation("kernel", chosen.key, chosen.label, reason, problem, (reason,))
        report.refuse(why.on(o.id), chosen)
        return False
    if ptx:
        cubins = sorted(a for a, cubin in held.items() if cubin)
        detail = (
            f"served by PTX JIT: bundle has {', '.join(cubins) or 'no cubin'} and {chosen.arch} "
            f"PTX, {MACHINE} {o.arch} (slower first load, no compile by warm)"
        )
        why = MissExplanation("kernel", chosen.key, chosen.label, "ptx", detail, ("arch",))
        report.by_jit(why.on(o.id), chosen)
    return True


def _unrunnable(
    first: KernelRecord,
    unfit: tuple[KernelRecord, tuple[str, str]] | None,
    target: Target,
    held: list[str],
) -> MissExplanation:
    """Why no build of one kernel runs on `target`: the driver, else the arch."""
    if unfit is not None:
        k, (component, why) = unfit
        return MissExplanation("kernel", k.key, k.label, component, why, (component,))
    detail = f"bundle has {', '.join(held)}, {MACHINE} {target.arch}"
    return MissExplanation("kernel", first.key, first.label, "arch", detail, ("arch",))


def _pick_served(
    bundle: Bundle, t: TuneRecord, label: str, report: CheckReport, offer: DeviceInfo
) -> None:
    """A measured tune whose pick's kernel the bundle does not serve (absent, or unsigned
    under trusted keys) is not servable: production hits it, then compiles that kernel, or
    (where its own build is another key) measures it again; nor is one whose pick's build
    does not run on `offer` as its own (or, with no compiler, the build it is served, as
    `_check_kernels` found it): production measures the tune again on that one."""
    kernel = next((c.kernel_key for c in t.candidates if c.name == t.pick), "")
    try:
        record = bundle.kernel(kernel)
    except BundleError:  # malformed: refused as the kernel it is (`corrupt`)
        return
    if record is None:
        detail = f"its pick {t.pick!r} is kernel {kernel[:16]}, which the bundle does not serve"
        detail += ": production compiles it, or measures the tune again on another build"
        report.refuse(MissExplanation("tune", t.key, label, "absent", detail).on(offer.id))
        return
    if recipe_of(record.toolchain) != BUILD_RECIPE:  # another warm's: its pick is served
        return
    target = Target(offer.backend, offer.arch, offer.driver, offer.toolchain)
    if offer.toolchain is None:  # no compiler: production runs the build it is served
        kin = (offer.fingerprint, *same_kernel(record))  # as its kernel was judged, else read:
        if (toolchain := report.served_by.get(kin)) == UNKNOWN:
            builds = bundle.each_kernel(record.entry, lambda *_: None, order=_SERVED_ORDER)
            found = choose((k for k in builds if same_kernel(k) == kin[1:]), target, _any)
            toolchain = found.toolchain if found else None
        target = Target(offer.backend, offer.arch, offer.driver, toolchain, own=False)
    why = why_not(record, target)
    if why is not None and why[0] in ("toolchain", "corrupt"):  # (corrupt: a changed row's)
        detail = f"its pick {t.pick!r} was measured on a build this machine is not served "
        detail += f"({why[1]}): production measures the tune again"
        why = MissExplanation("tune", t.key, label, "toolchain", detail, ("toolchain",))
        report.refuse(why.on(offer.id))


def _check_tunes(
    bundle: Bundle, records: Iterator[TuneRecord], offers: list[DeviceInfo], report: CheckReport
) -> None:
    """One tune's records (every device) against every device here, read once: memory
    holds, for each device, its own record's key and whether one is measured, and the
    first `_NAMED` devices the records are for."""
    first = next(records)
    label = f"{first.operation} {first.shape_key}"
    backend = first.device.split("|", 1)[0]
    here = [o for o in offers if o.backend == backend]
    archs, fingerprints = {o.arch for o in here}, {o.fingerprint for o in here}
    mine: dict[str, tuple[str, bool]] = {}  # a fingerprint here -> (its first key, measured)
    unsigned: dict[str, str] = {}  # a fingerprint here -> the key of its record none signed
    held: dict[str, None] = {}  # the devices of the records, in the order met
    prebuilt: dict[str, str] = {}  # an arch here -> the key of its GPU-less pre-build's record
    gauged: set[str] = set()  # archs here some GPU measured: a pre-build's is not the miss
    other = 0  # records for no arch here: counted in `report.other` if the tune is servable
    for t in itertools.chain((first,), records):
        report.tunes += 1
        if not here:
            report.skip("tune", t.key, label, backend, t.device)
            continue
        if t.device in fingerprints and _unsigned(bundle, t):
            unsigned.setdefault(t.device, t.key)
        elif t.device in fingerprints:
            key, measured = mine.get(t.device, (t.key, False))
            mine[t.device] = (key, measured or t.status == "measured")
            if t.status == "measured":
                gauged.add(_arch_of(t.device))
                offer = next(o for o in here if o.fingerprint == t.device)
                _pick_served(bundle, t, label, report, offer)
        else:
            arch = _arch_of(t.device)
            other += arch not in archs
            if arch in archs and t.device.split("|")[1:2] == [COMPILE_ONLY]:
                prebuilt.setdefault(arch, t.key)
            elif arch in archs and t.status == "measured":
                gauged.add(arch)
        if t.device in held or len(held) < _NAMED:
            held[t.device] = None
    if here and all(mine.get(o.fingerprint, ("", False))[1] for o in here):
        report.other += other
    for o in here:
        key, measured = mine.get(o.fingerprint, ("", False))
        if measured:
            continue
        if o.fingerprint in unsigned:
            report.refuse(_unsigned_miss("tune", unsigned[o.fingerprint], label).on(o.id))
            continue
        if key:
            detail = f"bundle holds this tune only as pending (not measured) for {o.id}"
            report.refuse(MissExplanation("tune", key, label, "pending", detail).on(o.id))
            continue
        if o.arch in prebuilt and o.arch not in gauged:
            detail = (
                f"pre-built without a GPU for {o.arch}, never measured: `warm run` on this "
                "machine measures it"
            )
            why = MissExplanation("tune", prebuilt[o.arch], label, "pending", detail)
            report.refuse(why.on(o.id))
            continue
        devices, want = [{"device": d} for d in held], {"device": o.fingerprint}
        nearest = explained("tune", first.key, label, want, devices, ("device",), MACHINE)
        assert nearest is not None  # none held is this device's: the nearest, what differs
        report.refuse(nearest.on(o.id))
