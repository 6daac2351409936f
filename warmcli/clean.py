"""Cleaning a bundle: drop what this machine can never use, and evict to a size.

An entry is *foreign* when it was made for another machine: a kernel built by a
toolchain whose identity is not this machine's compiler of that name (`cc`,
`nvcc`), or a host kernel for another CPU architecture; a tune measured on a
device whose fingerprint is none of this machine's. Such an entry can never be a
hit here (both identities are part of the keys). What this machine cannot judge
is kept: kernels of a compiler it does not have, tunes of a backend whose devices
it cannot list (CUDA without a GPU), and compile-only tunes (pending, finished on
any GPU later). `max_size` then evicts the least recently used kernels until the
binaries they need fit; a binary shared by a batch is freed with its last kernel.
`plan_clean` is pure; `clean_bundle` applies a plan to a bundle file (in one
transaction, then a vacuum). Nothing here prints.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from warmcli.bundle import Bundle, BundleError
from warmcli.device import DeviceFingerprint
from warmcli.records import KernelRecord, TuneRecord
from warmcli.toolchain import ToolchainError, probe

COMPILE_ONLY = "compile-only"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclass(frozen=True)
class Machine:
    """What this machine uses: compiler identities by name, host arch, device fingerprints."""

    toolchains: Mapping[str, str]
    host_arch: str
    devices: frozenset[str]
    backends: frozenset[str]


@dataclass(frozen=True)
class Removal:
    """One entry a clean removes, and why."""

    kind: str  # "kernel" or "tune"
    key: str
    label: str  # as `warm stats` names it
    where: str
    reason: str
    bytes: int = 0  # what removing a kernel frees: its binary, if no kernel kept shares it


@dataclass
class CleanPlan:
    removals: list[Removal] = field(default_factory=list)
    kept_unjudged: list[str] = field(default_factory=list)
    binary_bytes_before: int = 0
    binary_bytes_after: int = 0


@dataclass
class CleanReport:
    path: Path
    plan: CleanPlan
    applied: bool
    dry_run: bool
    file_bytes_before: int
    file_bytes_after: int


def where(device: str, arch: str) -> str:
    """A kernel's device and arch in one phrase (a compile-only device is named by its arch)."""
    return device if device == arch else f"{device} {arch}"


def parse_size(text: str) -> int:
    """Bytes from `123`, `500K`, `10M`, `1.5G` (powers of 1024; a trailing `B`/`iB` is fine)."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"not a size: {text!r} (use bytes, or a number with K, M, G or T)")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def current_machine() -> Machine:
    """This machine: its `cc` and `nvcc` (where found), host arch, every visible device."""
    from warmcli.host import HostDevice
    from warmcli.host.compiler import host_cc

    toolchains: dict[str, str] = {}
    with contextlib.suppress(ToolchainError):
        toolchains["cc"] = probe("cc", host_cc()).identity
    try:
        from warmcli.cuda.nvcc import NvccCompiler

        toolchains["nvcc"] = NvccCompiler().toolchain.identity
    except (ToolchainError, ImportError):
        pass
    host = HostDevice()
    devices = {host.fingerprint.identity}
    backends = {"host"}
    try:
        from warmcli.cuda.device import list_cuda_devices

        for d in list_cuda_devices():
            fp = DeviceFingerprint("cuda", str(d["name"]), str(d["arch"]), str(d["driver_version"]))
            devices.add(fp.identity)
            backends.add("cuda")
    except ImportError:
        pass
    return Machine(toolchains, host.arch, frozenset(devices), frozenset(backends))


def _kernel_foreign(k: KernelRecord, machine: Machine) -> tuple[str | None, str | None]:
    """(why it is foreign, why it cannot be judged); both None when it is this machine's."""
    compiler = k.toolchain.split(":", 1)[0]
    current = machine.toolchains.get(compiler)
    if current is None:
        return None, f"kernels of {compiler} (no {compiler} here)"
    if k.toolchain != current:
        return f"toolchain {k.toolchain} (here: {current})", None
    if k.backend == "host" and k.arch != machine.host_arch:
        return f"host arch {k.arch} (here: {machine.host_arch})", None
    return None, None


def _tune_foreign(t: TuneRecord, machine: Machine) -> tuple[str | None, str | None]:
    backend, _, rest = t.device.partition("|")
    if rest.startswith(COMPILE_ONLY + "|"):
        return None, None
    if backend not in machine.backends:
        return None, f"tunes on {backend} devices (none visible here)"
    if t.device not in machine.devices:
        return f"device {t.device} is not here", None
    return None, None


def _binary_bytes(kernels: list[KernelRecord]) -> int:
    return sum({k.sha256: k.size for k in kernels}.values())


def plan_clean(
    kernels: list[KernelRecord],
    tunes: list[TuneRecord],
    last_used: Mapping[str, float],
    machine: Machine,
    *,
    keep_foreign: bool = False,
    max_size: int | None = None,
) -> CleanPlan:
    """What a clean removes, and why (pure: the records in, the plan out)."""
    plan = CleanPlan(binary_bytes_before=_binary_bytes(kernels))
    unjudged: Counter[str] = Counter()
    kept: list[KernelRecord] = []
    for k in kernels:
        foreign, cannot = _kernel_foreign(k, machine)
        if cannot:
            unjudged[cannot] += 1
        if foreign and not keep_foreign:
            plan.removals.append(
                Removal("kernel", k.key, k.label, where(k.device, k.arch), foreign, k.size)
            )
        else:
            kept.append(k)
    for t in tunes:
        foreign, cannot = _tune_foreign(t, machine)
        if cannot:
            unjudged[cannot] += 1
        if foreign and not keep_foreign:
            plan.removals.append(
                Removal("tune", t.key, f"{t.operation} {t.shape_key}", t.device, foreign)
            )
    plan.kept_unjudged = [f"kept {n} {what}: cannot judge" for what, n in sorted(unjudged.items())]
    if max_size is not None:
        users = Counter(k.sha256 for k in kept)
        size = _binary_bytes(kept)
        evicted: set[str] = set()
        for k in sorted(kept, key=lambda k: (last_used.get(k.key, 0.0), k.key)):
            if size <= max_size:
                break
            users[k.sha256] -= 1
            if users[k.sha256] == 0:
                size -= k.size
            evicted.add(k.key)
            plan.removals.append(
                Removal(
                    "kernel",
                    k.key,
                    k.label,
                    where(k.device, k.arch),
                    f"least recently used (over {max_size:,} bytes)",
                    k.size,
                )
            )
        kept = [k for k in kept if k.key not in evicted]
    plan.binary_bytes_after = _binary_bytes(kept)
    _bytes_freed(plan, kernels, kept)
    return plan


def _bytes_freed(plan: CleanPlan, kernels: list[KernelRecord], kept: list[KernelRecord]) -> None:
    """Each kernel removal's `bytes`: what removing it frees. A binary a batch shares is
    freed by the last of its kernels to go (the others free nothing), never by one that
    stays, so the removals' bytes add up to `binary_bytes_before - binary_bytes_after`."""
    staying = {k.sha256 for k in kept}
    blob = {k.key: (k.sha256, k.size) for k in kernels}
    freed: set[str] = set()
    for i in reversed(range(len(plan.removals))):
        r = plan.removals[i]
        if r.kind != "kernel":
            continue
        sha, size = blob[r.key]
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
) -> CleanReport:
    """Plan a clean of the bundle at `path` and, unless `dry_run`, apply it."""
    path = Path(path)
    if not path.exists():  # never create one: there is nothing to clean
        raise BundleError(f"{path}: no such bundle")
    before = path.stat().st_size
    with Bundle.open(path, write=not dry_run) as bundle:
        plan = plan_clean(
            bundle.kernels(),
            bundle.tunes(),
            {key: used for key, (_, used) in bundle.usage().items()},
            machine or current_machine(),
            keep_foreign=keep_foreign,
            max_size=max_size,
        )
        applied = bool(plan.removals) and not dry_run
        if applied:
            bundle.delete(
                [r.key for r in plan.removals if r.kind == "kernel"],
                [r.key for r in plan.removals if r.kind == "tune"],
            )
            bundle.vacuum()
    return CleanReport(path, plan, applied, dry_run, before, path.stat().st_size)
