"""Which of a bundle's entries this machine would never serve (what `warm clean` drops).

A kernel is foreign when its binary runs on no device here (`warmcli.backends.serving`: a
host object of another CPU arch; a cubin of an arch, or a CUDA major release, no GPU here
takes; PTX no GPU here can JIT, or of a CUDA release newer than its driver's), or when
another toolchain built it and the bundle also holds a build of it by this machine's
toolchain that runs here (superseded; not a build whose nvcc read other options from the
environment, `NVCC_APPEND_FLAGS`..., or ran another `gcc`: another configuration;
one whose older warm named no `gcc` is superseded), or when another warm's build
recipe built it (served by no device, so judged with none here). A tune is foreign when
measured on a device whose fingerprint is none of this machine's. What cannot be judged
(a backend with no device listed here, a pending tune) is said, not judged. `Machine` is
what this machine uses, from the one inventory (`warmcli.backends.machine.inventory`).
This module is pure: it holds no state, never opens a bundle and never prints.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from warmcli.backends.base import COMPILE_ONLY
from warmcli.backends.machine import Inventory
from warmcli.backends.serving import (
    Target,
    nvcc_environment,
    nvcc_host,
    recipe_differs,
    same_kernel,
    why_not,
)
from warmcli.records import KernelRecord, TuneRecord


@dataclass(frozen=True)
class Machine:
    """What this machine uses: compiler identities by name, host arch, device fingerprints."""

    toolchains: Mapping[str, str]
    host_arch: str
    devices: frozenset[str]
    backends: frozenset[str]
    gpus: frozenset[tuple[str, str]] = frozenset()  # (arch, driver) of every GPU here

    @classmethod
    def of(cls, machine: Inventory) -> Machine:
        """What this machine's inventory (`warmcli.backends.machine.inventory`) uses."""
        return cls(
            machine.toolchains,
            machine.host_arch,
            machine.fingerprints,
            machine.backends,
            machine.gpus,
        )


def _build_of(k: KernelRecord) -> bytes:
    """A digest of what makes `k` one kernel's build for one arch, whatever its toolchain."""
    return hashlib.blake2b(repr((*same_kernel(k), k.arch)).encode(), digest_size=16).digest()


def local_builds(
    kernels: Iterable[KernelRecord], machine: Machine, corrupt: Collection[str] = ()
) -> set[bytes]:
    """`_build_of` every kernel built by this machine's toolchain of its compiler's name,
    but those whose blob is `corrupt` (by sha256) or whose binary runs on no device here
    (its CUDA release newer than the driver's): a build that cannot be served supersedes
    none."""
    return {
        _build_of(k)
        for k in kernels
        if machine.toolchains.get(k.toolchain.split(":", 1)[0]) == k.toolchain
        and k.sha256 not in corrupt
        and any(why_not(k, t) is None for t in _targets(k, machine) or ())
    }


def _targets(k: KernelRecord, machine: Machine) -> list[Target] | None:
    """The devices here `k` could be served on (`warmcli.backends.serving`), None when
    this machine cannot list its backend's (CUDA without a GPU)."""
    if k.backend == "host":
        return [Target("host", machine.host_arch)]
    if k.backend in machine.backends:
        return [Target(k.backend, arch, driver) for arch, driver in sorted(machine.gpus)]
    return None


def kernel_foreign(
    k: KernelRecord, machine: Machine, local: Collection[bytes]
) -> tuple[str | None, str | None]:
    """(why it is foreign, why it cannot be judged); both None when it is this machine's.

    Foreign: its binary runs on no device here (`warmcli.backends.serving`), or another toolchain
    built it and the bundle holds this machine's toolchain's build of it (`local`)."""
    recipe = recipe_differs(k.toolchain)  # served by no device: judged without one
    if recipe is not None:
        return recipe, None
    targets = _targets(k, machine)
    if targets is None:
        return None, f"{k.backend} kernels (no {k.backend} device visible here)"
    reasons = [why_not(k, t) for t in targets]
    if all(r is not None for r in reasons):
        first = next((r for r in reasons if r is not None), None)
        return (first[1] if first else f"no {k.backend} device here"), None
    compiler = k.toolchain.split(":", 1)[0]
    current = machine.toolchains.get(compiler)
    if (
        current is not None
        and k.toolchain != current
        and nvcc_environment(k.toolchain) == nvcc_environment(current)  # else: another config
        and nvcc_host(k.toolchain) in ("", nvcc_host(current))  # another gcc's too (none: older)
        and _build_of(k) in local
    ):
        return f"toolchain {k.toolchain} (superseded by this machine's {current})", None
    return None, None


def tune_foreign(t: TuneRecord, machine: Machine) -> tuple[str | None, str | None]:
    """(why it is foreign, why it cannot be judged), as `kernel_foreign`: a tune measured on
    a device whose fingerprint is none of this machine's; a pending one is not judged."""
    backend, _, rest = t.device.partition("|")
    if rest.startswith(COMPILE_ONLY + "|") or t.status == "pending":
        return None, "pending tunes (measured later on a GPU)"
    if backend not in machine.backends:
        return None, f"tunes on {backend} devices (none visible here)"
    if t.device not in machine.devices:
        return f"device {t.device} is not here", None
    return None, None
