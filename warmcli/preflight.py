"""Preflight: can this machine serve a bundle's entries, without running a workload?

A kernel entry is servable on a device here of its backend that has its
architecture and its toolchain identity (the compiler and version that key it; a
device with no compiler at all is served the bundle's build by architecture
alone, but cannot compile a miss). A tune entry is servable on a device whose
fingerprint is the one it was measured on. `check_servable` compares every entry
with the devices it is handed and returns those that are not servable, each as a
`MissExplanation` (the differing component, and what the bundle has against what
this machine has); a malformed entry is not servable either (reason `corrupt`).
A kernel whose cubins are all for older architectures than a GPU here, but whose
PTX (`compute_XX`) that GPU's driver can JIT, is servable and listed apart (`jit`):
a slower first load, still no compile by warm. The entries are streamed: memory
holds the first `LISTED` explanations and the counts, whatever the bundle's size.
It reads the bundle and probes compilers; it never compiles, launches or prints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from warmcli.bundle import Bundle, BundleError
from warmcli.cuda.ptx import PtxError, check_ptx, ptx_fallback, virtual_sm
from warmcli.device import Device, DeviceError
from warmcli.devices import cuda_available, open_devices
from warmcli.explain import MissExplanation, corrupt_entry, explained
from warmcli.host import HostDevice
from warmcli.records import KernelRecord
from warmcli.toolchain import ToolchainError

MACHINE = "this machine has"
LISTED = 1_000  # explanations kept (and shown by `warm check --json`); the rest are counted
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

    @classmethod
    def of(cls, device: Device) -> Offer:
        try:
            compiler = device.compiler(LANGUAGE.get(device.backend, "c"))
            identity: str | None = compiler.toolchain.identity
            problem = ""
        except (ToolchainError, DeviceError, ValueError) as exc:
            identity, problem = None, str(exc).splitlines()[0]
        fp = device.fingerprint.identity
        return cls(device.id, device.backend, device.arch, fp, identity, problem)


@dataclass
class CheckReport:
    bundle: Path
    offers: list[Offer]
    kernels: int = 0
    tunes: int = 0
    unservable: list[MissExplanation] = field(default_factory=list)  # the first `LISTED`
    unservable_count: int = 0
    jit: list[MissExplanation] = field(default_factory=list)  # served by PTX JIT (servable)

    @property
    def servable(self) -> bool:
        return self.unservable_count == 0

    def refuse(self, why: MissExplanation) -> None:
        """One entry not servable here: counted, and kept if it is among the first `LISTED`."""
        self.unservable_count += 1
        if len(self.unservable) < LISTED:
            self.unservable.append(why)

    def corrupt(self, kind: str) -> Callable[[str, str], None]:
        """The `on_error` of a listing: a malformed entry counts and is not servable."""

        def refuse(key: str, problem: str) -> None:
            if kind == "kernel":
                self.kernels += 1
            else:
                self.tunes += 1
            self.refuse(corrupt_entry(kind, key, f"entry {key[:16]}", problem))

        return refuse


def machine_devices(
    spec: str = "auto",
    archs: Sequence[str] = (),
    nvcc: str | None = None,
    compiler: str | None = None,
) -> list[Device]:
    """The devices to check against: the host and every GPU here (`auto`), or those named.

    `--arch sm_90` checks for a GPU of that architecture without one, beside the host.
    """
    if archs:
        return [HostDevice(), *open_devices(archs=archs, nvcc=nvcc, compiler=compiler)]
    if spec == "auto":
        gpus = open_devices("cuda", nvcc=nvcc, compiler=compiler) if cuda_available() else []
        return [HostDevice(), *gpus]
    return open_devices(spec, nvcc=nvcc, compiler=compiler)


def _closest(
    kind: str,
    key: str,
    label: str,
    held: dict[str, str],
    wants: list[dict[str, str]],
    order: tuple[str, ...],
) -> MissExplanation | None:
    """None when one device here matches `held`, else the explanation against the nearest."""
    found = [explained(kind, key, label, want, [held], order, MACHINE) for want in wants]
    if any(f is None for f in found):
        return None
    return min((f for f in found if f is not None), key=lambda f: len(f.differs))


def _absent(kind: str, key: str, label: str, backend: str, what: str) -> MissExplanation:
    detail = f"bundle has a {backend} {kind} for {what}, {MACHINE} no {backend} device"
    return MissExplanation(kind, key, label, "device", detail, ("device",))


def _by_ptx(
    bundle: Bundle,
    cubin: KernelRecord,
    ptx: Sequence[KernelRecord],
    offers: Sequence[Offer],
    report: CheckReport,
) -> MissExplanation | None:
    """None when a device here is served this kernel's PTX (then listed in `report.jit`),
    else why not: its PTX cannot be JIT-compiled here, or no cubin nor PTX fits."""
    same = {c: v for c, v in cubin.components.items() if c != "arch"}
    siblings = [
        p
        for p in ptx
        if p.entry == cubin.entry
        and p.toolchain == cubin.toolchain
        and {c: v for c, v in p.components.items() if c != "arch"} == same
    ]
    held = {"arch": cubin.arch, "toolchain": cubin.toolchain}
    wants = [{"arch": o.arch, "toolchain": o.toolchain or cubin.toolchain} for o in offers]
    refused = _closest("kernel", cubin.key, cubin.label, held, wants, ("toolchain", "arch"))
    for offer in offers:
        found = ptx_fallback(siblings, offer.arch, offer.toolchain)
        if found is None:
            continue
        driver = offer.fingerprint.rsplit("|", 1)[-1]
        try:
            check_ptx(bundle.blob(found.sha256), offer.arch, driver)
        except (PtxError, BundleError) as exc:
            detail = f"bundle has {found.arch} PTX for it, which {offer.id} cannot JIT: {exc}"
            refused = MissExplanation("kernel", cubin.key, cubin.label, "ptx", detail, ("arch",))
            continue
        detail = (
            f"served by PTX JIT: bundle has {cubin.arch} and {found.arch} PTX, {MACHINE} "
            f"{offer.arch} (slower first load, no compile by warm)"
        )
        report.jit.append(
            MissExplanation("kernel", cubin.key, cubin.label, "ptx", detail, ("arch",))
        )
        return None
    return refused


def check_servable(bundle: Bundle, devices: Sequence[Device]) -> CheckReport:
    """Every entry of `bundle` that none of `devices` can serve, and why."""
    offers = [Offer.of(d) for d in devices]
    report = CheckReport(bundle.path, offers)
    for k in bundle.each_kernel(on_error=report.corrupt("kernel")):
        if virtual_sm(k.arch) is not None:
            continue  # PTX: served with its cubins
        report.kernels += 1
        here = [o for o in offers if o.backend == k.backend]
        if not here:
            report.refuse(_absent("kernel", k.key, k.label, k.backend, k.arch))
            continue
        held = {"arch": k.arch, "toolchain": k.toolchain}
        wants = [{"arch": o.arch, "toolchain": o.toolchain or k.toolchain} for o in here]
        why = _closest("kernel", k.key, k.label, held, wants, ("toolchain", "arch"))
        if why is not None and why.reason == "arch" and k.backend == "cuda":
            ptx = [
                p
                for p in bundle.each_kernel(k.entry, on_error=lambda *_: None)
                if virtual_sm(p.arch) is not None
            ]
            why = _by_ptx(bundle, k, ptx, here, report)
        if why is not None:
            report.refuse(why)
    for t in bundle.each_tune(on_error=report.corrupt("tune")):
        report.tunes += 1
        label = f"{t.operation} {t.shape_key}"
        backend = t.device.split("|", 1)[0]
        here = [o for o in offers if o.backend == backend]
        if not here:
            report.refuse(_absent("tune", t.key, label, backend, t.device))
            continue
        wants = [{"device": o.fingerprint} for o in here]
        why = _closest("tune", t.key, label, {"device": t.device}, wants, ("device",))
        if why is not None:
            report.refuse(why)
    return report
