"""What the caches hand the bundle, and what the bundle hands back: plain records.

A `KernelRecord` is one compiled kernel (its key, where and by what it was
built, the symbol it has in its binary, the binary's sha256, the compile log and
time); the binary itself travels beside it, never inside it, so a bundle can be
opened without reading a single blob. A `TuneRecord` is one tune decision with
the evidence: every candidate's measurement, failed ones with their reason. These
are data only: JSON in and out, no behaviour, nothing executable; `tune_key` is
the one function, so the bundle can check a tune row's key against its fields (and
`where`, the one phrase naming a kernel's device and arch).
A `CompilerCommand` is one compiler process a pass ran (the device it built for, and
its argv), counted by the statistics collector and shown by `warm run -v`.
A `MissExplanation` is one miss a bundle could not serve, explained (its `line` is
escaped with `warmcli.printable`, as everything read from a bundle is).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

from warmcli.printable import printable


@dataclass(frozen=True)
class KernelRecord:
    key: str
    device: str
    backend: str
    arch: str
    entry: str
    label: str
    symbol: str
    sha256: str
    toolchain: str
    components: dict[str, str] = field(default_factory=dict)
    compile_log: str = ""
    seconds: float = 0.0
    size: int = 0


def where(device: str, arch: str) -> str:
    """A kernel's device and arch in one phrase (a compile-only device is named by its arch)."""
    return device if device == arch else f"{device} {arch}"


@dataclass(frozen=True)
class CompilerCommand:
    """One compiler process a compile ran: the device it built for, and its argv."""

    device_id: str
    argv: tuple[str, ...]


@dataclass(frozen=True)
class CandidateMeasurement:
    """One candidate of a tune: its median time, every sample, or why it failed."""

    name: str
    kernel_key: str
    status: str  # "ok", "failed" or "pending"
    seconds: float | None = None
    samples: tuple[float, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class TuneRecord:
    """One tune decision: key parts, the pick and all candidates' measurements."""

    key: str
    operation: str
    shape_key: str
    device: str
    checksum: str
    status: str  # "measured" or "pending"
    pick: str | None
    candidates: tuple[CandidateMeasurement, ...]
    seconds: float = 0.0
    measured_at: float = 0.0

    def candidates_json(self) -> str:
        return json.dumps([asdict(c) for c in self.candidates], separators=(",", ":"))

    @staticmethod
    def candidates_from(items: object) -> tuple[CandidateMeasurement, ...]:
        """The candidates of `candidates_json`'s output once parsed back from JSON."""
        if not isinstance(items, list):
            raise ValueError("candidates is not a list")
        out = []
        for item in items:
            if not isinstance(item, dict):
                raise ValueError("candidate is not an object")
            seconds = item.get("seconds")
            out.append(
                CandidateMeasurement(
                    str(item["name"]),
                    str(item.get("kernel_key", "")),
                    str(item["status"]),
                    None if seconds is None else float(seconds),
                    tuple(map(float, item.get("samples", ()))),
                    str(item.get("reason", "")),
                )
            )
        return tuple(out)


@dataclass(frozen=True)
class MissExplanation:
    """One miss: what was missed, the key component that differs, and the two values
    (`warmcli.runtime.explain` builds them; statistics, checks and reports carry them)."""

    kind: str  # "kernel" or "tune"
    key: str
    label: str
    reason: str  # one of `warmcli.runtime.explain.REASONS`
    detail: str  # "bundle has X, this process wants Y"
    differs: tuple[str, ...] = ()  # every component the nearest entry differs in

    def line(self) -> str:
        """One line to print or log: the bundle's text in it has its control characters
        escaped, so it cannot forge a line or drive a terminal."""
        return printable(f"{self.kind} {self.label}: {self.reason}: {self.detail}")

    def as_dict(self) -> dict[str, object]:
        return {**asdict(self), "differs": list(self.differs)}


def tune_key(operation: str, shape_key: str, device_identity: str, checksum: str) -> str:
    """The key of one tune: operation, shape key, device fingerprint, candidate set."""
    payload = [operation, shape_key, device_identity, checksum]
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()


@dataclass(frozen=True)
class HeldElsewhere:
    """Entries a bundle holds for a backend that are never served on this device: `count`
    kernels for `arch` that another toolchain (`by`) built (`kind` "kernel"), or tunes
    that another device (`by`, its fingerprint identity) measured (`kind` "tune")."""

    kind: str
    by: str
    count: int
    arch: str = ""
