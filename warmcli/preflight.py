"""Preflight: can this machine serve a bundle's entries, without running a workload?

For every device here, every kernel the bundle holds (for any arch) must have a
build that runs on that device by `warmcli.serving`'s rule (arch, and for a cubin
the driver's CUDA version; any toolchain, the device's own preferred), and the blob
of that build must match its sha256; every tune (operation, shapes, candidate set)
must have a measured pick on that device's fingerprint (a pending tune is not
servable). Entries only other machines would use (another arch) are counted as
"not for this machine", never failing. `check_servable` returns what is not
servable, each as a `MissExplanation` (the differing component, and what the
bundle has against what this machine has). It reads the bundle, hashes the blobs
it would serve and probes compilers; it never compiles, launches or prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from warmcli.bundle import Bundle, BundleError
from warmcli.device import Device, DeviceError
from warmcli.devices import cuda_available, open_devices
from warmcli.explain import MissExplanation, explained
from warmcli.host import HostDevice
from warmcli.records import KernelRecord, TuneRecord
from warmcli.serving import Target, choose, same_kernel, why_not
from warmcli.toolchain import ToolchainError

MACHINE = "this machine has"
LANGUAGE = {"host": "c", "cuda": "cuda"}


@dataclass(frozen=True)
class Offer:
    """What one device here offers a bundle: its arch, fingerprint and compiler identity."""

    id: str
    backend: str
    arch: str
    fingerprint: str
    toolchain: str | None  # None: no compiler here (the bundle's builds are served by arch)
    problem: str = ""  # why there is no compiler
    driver: str = ""  # the fingerprint's driver (a CUDA version on a GPU)

    @classmethod
    def of(cls, device: Device) -> Offer:
        try:
            compiler = device.compiler(LANGUAGE.get(device.backend, "c"))
            identity: str | None = compiler.toolchain.identity
            problem = ""
        except (ToolchainError, DeviceError, ValueError) as exc:
            identity, problem = None, str(exc).splitlines()[0]
        fp = device.fingerprint
        return cls(
            device.id, device.backend, device.arch, fp.identity, identity, problem, fp.driver
        )


@dataclass
class CheckReport:
    bundle: Path
    offers: list[Offer]
    kernels: int = 0
    tunes: int = 0
    unservable: list[MissExplanation] = field(default_factory=list)
    other: int = 0  # entries only other machines use ("not for this machine")

    @property
    def servable(self) -> bool:
        return not self.unservable


def machine_devices(
    spec: str = "auto", archs: Sequence[str] = (), nvcc: str | None = None
) -> list[Device]:
    """The devices to check against: the host and every GPU here (`auto`), or those named.

    `--arch sm_90` checks for a GPU of that architecture without one, beside the host.
    """
    if archs:
        return [HostDevice(), *open_devices(archs=archs, nvcc=nvcc)]
    if spec == "auto":
        return [HostDevice(), *(open_devices("cuda", nvcc=nvcc) if cuda_available() else [])]
    return open_devices(spec, nvcc=nvcc)


def _closest(
    kind: str,
    key: str,
    label: str,
    held: list[dict[str, str]],
    want: dict[str, str],
    order: tuple[str, ...],
) -> MissExplanation:
    """Why none of `held` is what a device here wants: the nearest and what differs."""
    found = explained(kind, key, label, want, held, order, MACHINE)
    assert found is not None  # callers found no match
    return found


def _absent(kind: str, key: str, label: str, backend: str, what: str) -> MissExplanation:
    detail = f"bundle has a {backend} {kind} for {what}, {MACHINE} no {backend} device"
    return MissExplanation(kind, key, label, "device", detail, ("device",))


def _tune_group(t: TuneRecord) -> tuple[str, ...]:
    return (t.device.split("|", 1)[0], t.operation, t.shape_key, t.checksum)


def _arch_of(fingerprint: str) -> str:
    parts = fingerprint.split("|")
    return parts[2] if len(parts) > 2 else ""


def check_servable(bundle: Bundle, devices: Sequence[Device]) -> CheckReport:
    """Every entry of `bundle` that a device here would use and cannot be served, and why.

    For each device here, each kernel the bundle holds (for any arch) must have a build
    that runs on it (`warmcli.serving`) whose blob matches its sha256, and each tune a
    measured pick on its fingerprint. Entries only other machines use are counted in
    `other`, never failing.
    """
    offers = [Offer.of(d) for d in devices]
    report = CheckReport(bundle.path, offers)
    kernels: dict[tuple[str, ...], list[KernelRecord]] = {}
    for k in bundle.kernels():
        report.kernels += 1
        kernels.setdefault(same_kernel(k), []).append(k)
    blobs: dict[str, str] = {}  # sha256 -> why its blob cannot be served ("" when it can)
    for group in kernels.values():
        _check_kernels(bundle, group, offers, report, blobs)
    tunes: dict[tuple[str, ...], list[TuneRecord]] = {}
    for t in bundle.tunes():
        report.tunes += 1
        tunes.setdefault(_tune_group(t), []).append(t)
    for group in tunes.values():
        _check_tunes(group, offers, report)
    return report


def _check_kernels(
    bundle: Bundle,
    group: list[KernelRecord],
    offers: list[Offer],
    report: CheckReport,
    blobs: dict[str, str],
) -> None:
    first = group[0]
    here = [o for o in offers if o.backend == first.backend]
    if not here:
        for k in group:
            report.unservable.append(_absent("kernel", k.key, k.label, k.backend, k.arch))
        return
    used: set[str] = set()
    for o in here:
        target = Target(o.backend, o.arch, o.driver, o.toolchain)
        chosen = choose(group, target, lambda _: True)
        if chosen is None:
            report.unservable.append(_unrunnable(group, target))
            continue
        used.add(chosen.key)
        if chosen.sha256 not in blobs:
            try:
                bundle.blob(chosen.sha256)
                blobs[chosen.sha256] = ""
            except BundleError as exc:
                blobs[chosen.sha256] = str(exc)
        if blobs[chosen.sha256]:
            detail = f"bundle's build: {blobs[chosen.sha256]}"
            report.unservable.append(
                MissExplanation("kernel", chosen.key, chosen.label, "binary", detail, ("binary",))
            )
    archs = {o.arch for o in here}
    report.other += sum(1 for k in group if k.key not in used and k.arch not in archs)


def _unrunnable(group: list[KernelRecord], target: Target) -> MissExplanation:
    """Why no build of one kernel runs on `target`: the driver, else the arch."""
    first = group[0]
    for k in group:
        why = why_not(k, target)
        if why is not None and why[0] != "arch":
            return MissExplanation("kernel", k.key, k.label, why[0], why[1], (why[0],))
    held = ", ".join(sorted({k.arch for k in group}))
    detail = f"bundle has {held}, {MACHINE} {target.arch}"
    return MissExplanation("kernel", first.key, first.label, "arch", detail, ("arch",))


def _check_tunes(group: list[TuneRecord], offers: list[Offer], report: CheckReport) -> None:
    first = group[0]
    label = f"{first.operation} {first.shape_key}"
    backend = first.device.split("|", 1)[0]
    here = [o for o in offers if o.backend == backend]
    if not here:
        for t in group:
            report.unservable.append(_absent("tune", t.key, label, backend, t.device))
        return
    used: set[str] = set()
    for o in here:
        mine = [t for t in group if t.device == o.fingerprint]
        used.update(t.key for t in mine)
        if any(t.status == "measured" for t in mine):
            continue
        if mine:
            detail = f"bundle holds this tune only as pending (not measured) for {o.id}"
            report.unservable.append(MissExplanation("tune", mine[0].key, label, "pending", detail))
            continue
        held = [{"device": t.device} for t in group]
        report.unservable.append(
            _closest("tune", first.key, label, held, {"device": o.fingerprint}, ("device",))
        )
    archs = {o.arch for o in here}
    report.other += sum(1 for t in group if t.key not in used and _arch_of(t.device) not in archs)
