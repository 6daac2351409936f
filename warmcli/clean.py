"""Cleaning a bundle: drop what this machine can never use, and evict to a size.

A kernel is *corrupt* when its blob is missing or fails its sha256: removed, so the
next `warm run` builds it again. An entry is *foreign* when this machine would
never serve it: a kernel whose binary runs on no device here (`warmcli.serving`: a
host object of another CPU arch; a cubin of an arch, or a CUDA release, no GPU here
takes), or one another toolchain built that the bundle also holds a build of this
machine's toolchain for (superseded); a tune measured on a device whose fingerprint
is none of this machine's. What this machine cannot judge is kept and listed
(`kept_unjudged`): kernels and tunes of a backend whose devices it cannot list (CUDA
without a GPU), and pending tunes (compile-only, finished on any GPU later).
`max_size` then evicts the least recently used kernels until the binaries they need
fit; a binary shared by a batch is freed with its last kernel. `plan_clean` is pure;
`clean_bundle` applies a plan to a bundle file (in one transaction, then a vacuum).
Nothing here prints.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from warmcli.bundle import Bundle, BundleError
from warmcli.device import DeviceFingerprint
from warmcli.records import KernelRecord, TuneRecord
from warmcli.serving import Target, same_kernel, why_not
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
    gpus: frozenset[tuple[str, str]] = frozenset()  # (arch, driver) of every GPU here


@dataclass(frozen=True)
class Removal:
    """One entry a clean removes, and why."""

    kind: str  # "kernel" or "tune"
    key: str
    label: str  # as `warm stats` names it
    where: str
    reason: str
    bytes: int = 0  # a kernel's binary size


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
    gpus: set[tuple[str, str]] = set()
    try:
        from warmcli.cuda.device import list_cuda_devices

        for d in list_cuda_devices():
            fp = DeviceFingerprint("cuda", str(d["name"]), str(d["arch"]), str(d["driver_version"]))
            devices.add(fp.identity)
            backends.add("cuda")
            gpus.add((fp.arch, fp.driver))
    except ImportError:
        pass
    return Machine(toolchains, host.arch, frozenset(devices), frozenset(backends), frozenset(gpus))


def _kernel_foreign(
    k: KernelRecord, machine: Machine, local: set[tuple[str, ...]]
) -> tuple[str | None, str | None]:
    """(why it is foreign, why it cannot be judged); both None when it is this machine's.

    Foreign: its binary runs on no device here (`warmcli.serving`), or another toolchain
    built it and the bundle holds this machine's toolchain's build of it (`local`)."""
    if k.backend == "host":
        targets = [Target("host", machine.host_arch)]
    elif k.backend in machine.backends:
        targets = [Target(k.backend, arch, driver) for arch, driver in sorted(machine.gpus)]
    else:
        return None, f"{k.backend} kernels (no {k.backend} device visible here)"
    reasons = [why_not(k, t) for t in targets]
    if all(r is not None for r in reasons):
        first = next((r for r in reasons if r is not None), None)
        return (first[1] if first else f"no {k.backend} device here"), None
    compiler = k.toolchain.split(":", 1)[0]
    current = machine.toolchains.get(compiler)
    if current is not None and k.toolchain != current and (*same_kernel(k), k.arch) in local:
        return f"toolchain {k.toolchain} (superseded by this machine's {current})", None
    return None, None


def _tune_foreign(t: TuneRecord, machine: Machine) -> tuple[str | None, str | None]:
    backend, _, rest = t.device.partition("|")
    if rest.startswith(COMPILE_ONLY + "|") or t.status == "pending":
        return None, "pending tunes (measured later on a GPU)"
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
    corrupt: Mapping[str, str] | None = None,
) -> CleanPlan:
    """What a clean removes, and why (pure: the records in, the plan out). `corrupt`: the
    sha256 of every blob that fails it, and why; its kernels are removed (`corrupt`)."""
    plan = CleanPlan(binary_bytes_before=_binary_bytes(kernels))
    unjudged: Counter[str] = Counter()
    kept: list[KernelRecord] = []
    local = {
        (*same_kernel(k), k.arch)
        for k in kernels
        if machine.toolchains.get(k.toolchain.split(":", 1)[0]) == k.toolchain
    }
    for k in kernels:
        if corrupt and k.sha256 in corrupt:
            reason = f"corrupt: {corrupt[k.sha256]}"
            plan.removals.append(
                Removal("kernel", k.key, k.label, where(k.device, k.arch), reason, k.size)
            )
            continue
        foreign, cannot = _kernel_foreign(k, machine, local)
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
    return plan


def _corrupt_blobs(bundle: Bundle) -> dict[str, str]:
    """Every kernel's blob that is missing or fails its sha256 (read one at a time)."""
    stored = {sha: actual for sha, _, actual in bundle.blob_digests()}
    bad: dict[str, str] = {}
    for k in bundle.kernels():
        actual = stored.get(k.sha256)
        if actual is None:
            bad[k.sha256] = "its blob is missing"
        elif actual != k.sha256:
            bad[k.sha256] = "its blob does not match its sha256"
    return bad


def drop_corrupt(bundle: Bundle) -> int:
    """Remove every kernel whose blob is missing or fails its sha256, so a `warm run`
    over the bundle builds again what its workload reaches; returns kernels removed."""
    bad = _corrupt_blobs(bundle)
    keys = [k.key for k in bundle.kernels() if k.sha256 in bad] if bad else []
    if keys:
        bundle.delete(keys)
    return len(keys)


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
            corrupt=_corrupt_blobs(bundle),
        )
        applied = bool(plan.removals) and not dry_run
        if applied:
            bundle.delete(
                [r.key for r in plan.removals if r.kind == "kernel"],
                [r.key for r in plan.removals if r.kind == "tune"],
            )
            bundle.vacuum()
    return CleanReport(path, plan, applied, dry_run, before, path.stat().st_size)
