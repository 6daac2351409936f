"""Cleaning a bundle: drop what this machine can never use, and evict to a size.

An entry is *foreign* when it was made for another machine: a kernel built by a
toolchain whose identity is not this machine's compiler of that name (`cc`,
`nvcc`, `nvrtc`), or a host kernel for another CPU architecture; a tune measured on a
device whose fingerprint is none of this machine's. Such an entry can never be a
hit here (both identities are part of the keys). What this machine cannot judge
is kept: kernels of a compiler it does not have, tunes of a backend whose devices
it cannot list (CUDA without a GPU), and compile-only tunes (pending, finished on
any GPU later). `max_size` then evicts the least recently used kernels until the
binaries they need fit; a binary shared by a batch is freed with its last kernel.
The entries stream through the plan, which counts every removal by reason and
keeps the first `LISTED` whole (to show), and the keys to remove only when it is
to be applied: memory holds no whole table (`max_size` alone keeps the key, blob
and time of each kept kernel, to order them). `plan_clean` is pure; `clean_bundle`
applies a plan to a bundle file (in one transaction, then a vacuum). Nothing here
prints.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from warmcli.bundle import AS_STORED, Bundle, BundleError
from warmcli.device import DeviceFingerprint
from warmcli.records import KernelRecord, TuneRecord
from warmcli.toolchain import ToolchainError, probe

COMPILE_ONLY = "compile-only"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
LISTED = 1_000  # removals a plan keeps whole (and shows); every one is counted by reason
OTHER_REASONS = "other reasons"  # where removals go once `LISTED` reasons are counted


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
        if self.keys is not None:
            self.keys.setdefault(removal.kind, []).append(removal.key)


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
    """This machine: its `cc`, `nvcc` and NVRTC (where found), host arch, every visible device."""
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
    try:
        from warmcli.cuda.nvrtc import NvrtcCompiler

        toolchains["nvrtc"] = NvrtcCompiler().toolchain.identity
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


def _lru(
    kept: list[tuple[float, str, str]],
    sizes: Mapping[str, int],
    max_size: int,
    plan: CleanPlan,
    labels: Callable[[str], KernelRecord | None],
    listed: dict[str, tuple[str, int]],
) -> set[str]:
    """Evict the least recently used of `kept` (last used, key, blob) until the blobs the
    rest use fit in `max_size`; the keys evicted."""
    users = Counter(sha for _, _, sha in kept)
    size = sum(sizes[sha] for sha in users)
    evicted: set[str] = set()
    for _, key, sha in sorted(kept):
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
) -> CleanPlan:
    """What a clean removes, and why (pure: each kernel with its last-used time, and each
    tune, streamed in; the plan out). `apply`: keep every key to remove; `labels` names
    a kernel evicted by `max_size` (by its key)."""
    plan = CleanPlan(keys={} if apply else None)
    unjudged: Counter[str] = Counter()
    sizes: dict[str, int] = {}  # by blob: what every kernel uses
    kept_sizes: dict[str, int] = {}  # by blob: what the kept kernels use
    kept: list[tuple[float, str, str]] = []  # (last used, key, blob), for `max_size` only
    listed: dict[str, tuple[str, int]] = {}  # the listed kernel removals' (blob, size)
    for k, last_used in kernels:
        sizes[k.sha256] = k.size
        foreign, cannot = _kernel_foreign(k, machine)
        if cannot:
            unjudged[cannot] += 1
        if foreign and not keep_foreign:
            if len(plan.removals) < LISTED:
                listed[k.key] = (k.sha256, k.size)
            plan.remove(Removal("kernel", k.key, k.label, where(k.device, k.arch), foreign, k.size))
            continue
        kept_sizes[k.sha256] = k.size
        if max_size is not None:
            kept.append((last_used, k.key, k.sha256))
    for t in tunes:
        foreign, cannot = _tune_foreign(t, machine)
        if cannot:
            unjudged[cannot] += 1
        if foreign and not keep_foreign:
            label = f"{t.operation} {t.shape_key}"
            plan.remove(Removal("tune", t.key, label, t.device, foreign))
    plan.kept_unjudged = [f"kept {n} {what}: cannot judge" for what, n in sorted(unjudged.items())]
    plan.binary_bytes_before = sum(sizes.values())
    plan.binary_bytes_after = sum(kept_sizes.values())
    staying = set(kept_sizes)
    if max_size is not None:
        evicted = _lru(kept, sizes, max_size, plan, labels, listed)
        in_use = {sha for _, key, sha in kept if key not in evicted}
        plan.binary_bytes_after = sum(sizes[sha] for sha in in_use)
        staying = in_use
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
) -> CleanReport:
    """Plan a clean of the bundle at `path` and, unless `dry_run`, apply it."""
    path = Path(path)
    if not path.exists():  # never create one: there is nothing to clean
        raise BundleError(f"{path}: no such bundle")
    before = path.stat().st_size
    with Bundle.open(path, write=not dry_run) as bundle:
        plan = plan_clean(
            ((k, used) for k, (_, used) in bundle.each_kernel_used(order=AS_STORED)),
            bundle.each_tune(order=AS_STORED),
            machine or current_machine(),
            keep_foreign=keep_foreign,
            max_size=max_size,
            apply=not dry_run,
            labels=bundle.kernel,
        )
        applied = bool(plan.removals) and not dry_run
        if applied and plan.keys is not None:
            bundle.delete(plan.keys.get("kernel", []), plan.keys.get("tune", []))
            bundle.vacuum()
    return CleanReport(path, plan, applied, dry_run, before, path.stat().st_size)
