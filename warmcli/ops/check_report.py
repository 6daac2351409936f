"""What `warm check` found (`warmcli.ops.check.check_servable` fills it): a `CheckReport`.

It counts the kernels judged (each once, however many builds: `kernels`) and their rows (a
cubin, PTX or host build each: `builds`, as `warm stats` lists them), the tunes (a record per
device), the entries not servable here (the first `LISTED` kept, as `MissExplanation`s, each
kernel's with its source digest in `sources`, its device and arch in `places`), those served
by PTX JIT (`jit_count`; the first `LISTED` kept in `jit`, so memory holds however many a
bundle has), the cubins and tune records only other architectures use of a servable entry
(`other`; `other_builds` the cubins) and, per backend with no device here, the entries not
judged (`unchecked`: `skip`, which refuses those of a backend no warm serves; `corrupt`
counts a malformed one as not servable) and the first `ARCHS_NAMED` GPU archs their cubins
are for (`unchecked_archs`: what `--arch` would check them for).
It holds only these counts and lists; it reads no bundle and never prints.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from warmcli.backends.machine import LANGUAGE, DeviceInfo
from warmcli.kernel_parts import source_digest
from warmcli.ops.served_builds import ServedBuilds
from warmcli.printable import LISTED, Pattern
from warmcli.records import KernelRecord
from warmcli.runtime.explain import MissExplanation, corrupt_entry

ARCHS_NAMED = 8  # the unchecked cubins' archs kept, however many a bundle names
_CUBIN_ARCH = Pattern(r"sm_[1-9][0-9]{1,2}[af]?")  # an arch `--arch` takes, nothing else


@dataclass
class CheckReport:
    bundle: Path
    offers: list[DeviceInfo]  # each device here, as `warmcli.backends.machine` describes it
    kernels: int = 0  # each once, however many builds
    builds: int = 0  # kernel rows: a cubin, PTX or host build each
    tunes: int = 0
    unservable: list[MissExplanation] = field(default_factory=list)  # the first `LISTED`
    unservable_count: int = 0
    jit: list[MissExplanation] = field(default_factory=list)  # by PTX JIT: the first `LISTED`
    jit_count: int = 0  # kernels served by PTX JIT (servable), all of them
    other: int = 0  # servable entries' cubins and tune records for other archs only
    other_builds: int = 0  # of `other`, the cubins
    sources: dict[str, str] = field(default_factory=dict)  # a listed kernel's source digest
    places: dict[str, tuple[str, str]] = field(default_factory=dict)  # its device and arch
    served_by: ServedBuilds = field(default_factory=ServedBuilds)  # for `_pick_served`
    unchecked: dict[str, list[int]] = field(default_factory=dict)  # backend -> [kernels, tunes]
    unchecked_archs: list[str] = field(default_factory=list)  # GPU archs of unchecked cubins

    def skip(self, kind: str, key: str, label: str, backend: str, what: str, n: int = 1) -> None:
        """An entry (counted `n`) of a backend with no device here: not judged if warm serves
        it (CUDA, no GPU or `--arch`), else not servable (no count per name a bundle gives)."""
        if backend in LANGUAGE:
            self.unchecked.setdefault(backend, [0, 0])[kind == "tune"] += n
            named = self.unchecked_archs  # a cubin's arch, as `--arch` takes it (bounded)
            new = kind == "kernel" and backend == "cuda" and what not in named
            if new and len(named) < ARCHS_NAMED and _CUBIN_ARCH.fullmatch(what):
                named.append(what)
        elif n:
            detail = f"bundle has a {backend} {kind} for {what}, no warm serves {backend}"
            self.refuse(MissExplanation(kind, key, label, "device", detail, ("device",)))

    @property
    def servable(self) -> bool:
        return self.unservable_count == 0

    def refuse(self, why: MissExplanation, k: KernelRecord | None = None) -> None:
        """One entry (kernel `k`'s) not servable here: counted, and kept if among the first
        `LISTED` (`k`'s source digest with it)."""
        self.unservable_count += 1
        if len(self.unservable) < LISTED:
            self.unservable.append(why)
            if k is not None:
                self._listed(why.key, k)

    def by_jit(self, why: MissExplanation, k: KernelRecord) -> None:
        """Kernel `k`, servable here by PTX JIT: counted, and kept if among the first `LISTED`
        (its source digest with it), so that memory holds however many a bundle has."""
        self.jit_count += 1
        if len(self.jit) < LISTED:
            self.jit.append(why)
            self._listed(why.key, k)

    def _listed(self, key: str, k: KernelRecord) -> None:
        """Keep what a listed kernel's row shows beside it: its source digest, device, arch."""
        self.sources[key] = source_digest(k.components)
        self.places[key] = (k.device, k.arch)

    def corrupt(self, kind: str) -> Callable[[str, str], None]:
        """The `on_error` of a listing: a malformed entry counts and is not servable."""

        def refuse(key: str, problem: str) -> None:
            self.kernels += kind == "kernel"
            self.builds += kind == "kernel"
            self.tunes += kind != "kernel"
            self.refuse(corrupt_entry(kind, key, f"entry {key[:16]}", problem))

        return refuse
