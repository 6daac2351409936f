"""Counts of what a pass triggered, per device, readable from any thread.

The code doing the work (compile queue, tune cache, launch path) counts into a
`StatisticsCollector`; a `StatisticsReader` takes consistent snapshots of it from
any thread while a pass runs (progress bars poll one). Snapshots are frozen
dataclasses: `CompilationStatistics`, `AutotuneStatistics`, `ExecutionStatistics`
per device. A miss a bundle could not serve (a `warmcli.records.MissExplanation`) is
counted by the reason `warmcli.runtime.explain` gives (the `misses` mapping, reason
to count) and kept whole.
The collector owns the counters and a lock; it never decides what is counted,
and never prints.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from warmcli.records import CompilerCommand, MissExplanation

MISS = "misses."  # counter-name prefix of a miss's reason


@dataclass(frozen=True)
class CompilationStatistics:
    """Kernels: first seen, queued, compiled, loaded from a bundle, failed; batches run."""

    registered: int = 0
    queued: int = 0
    compiled: int = 0
    loaded: int = 0
    ptx_jit: int = 0  # of `loaded`: PTX the driver JITs (a GPU newer than every cubin)
    failed: int = 0
    batches: int = 0
    compiler_processes: int = 0
    seconds: float = 0.0
    misses: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class AutotuneStatistics:
    """Tunes: first seen, measured, failed, served from the cache, persisted; candidates.

    `unrecorded` counts tunes a `CompileOnly` pass reached that had no record at all
    (neither measured nor pending) here or in the bundle.
    """

    registered: int = 0
    measured: int = 0
    failed: int = 0
    hits: int = 0
    persisted: int = 0
    pending: int = 0
    unrecorded: int = 0
    candidates_registered: int = 0
    candidates_measured: int = 0
    candidates_failed: int = 0
    seconds: float = 0.0
    misses: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ExecutionStatistics:
    """Launches: run, compiled and discarded, only queued."""

    executed: int = 0
    discarded: int = 0
    queued: int = 0
    discarded_reads: int = 0


@dataclass(frozen=True)
class DeviceStatistics:
    """All three views of one device."""

    compilation: CompilationStatistics = field(default_factory=CompilationStatistics)
    autotune: AutotuneStatistics = field(default_factory=AutotuneStatistics)
    execution: ExecutionStatistics = field(default_factory=ExecutionStatistics)

    def __add__(self, other: DeviceStatistics) -> DeviceStatistics:
        return DeviceStatistics(*(_add(getattr(self, f), getattr(other, f)) for f in _VIEWS))


_VIEWS = ("compilation", "autotune", "execution")


def _add(a: object, b: object) -> object:
    return type(a)(
        **{f.name: _sum(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a)}
    )


def _sum(x: object, y: object) -> object:
    if isinstance(x, dict) and isinstance(y, dict):
        return dict(sorted((Counter(x) + Counter(y)).items()))
    return x + y  # type: ignore[operator]


class StatisticsCollector:
    """Thread-safe counters, per device and per view (`compilation`, `autotune`, `execution`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, dict[str, Counter[str]]] = {}
        self._notes: list[str] = []
        self._commands: list[CompilerCommand] = []
        self._misses: list[MissExplanation] = []
        self._seen: set[tuple[str, str, str, str]] = set()

    def count(self, device: str, view: str, name: str, amount: float = 1) -> None:
        """Add `amount` to one counter; `view` is one of the three statistics kinds."""
        if view not in _VIEWS:
            raise ValueError(f"unknown statistics view {view!r}")
        with self._lock:
            views = self._counts.get(device)
            if views is None:  # built once per device, not on every count (a launch counts)
                views = self._counts[device] = {v: Counter() for v in _VIEWS}
            views[view][name] += amount

    def count_once(self, device: str, view: str, name: str, token: str) -> bool:
        """Count `name` once per distinct `token` (a kernel or tune key); True if it was new."""
        with self._lock:
            seen = (device, view, name, token)
            if seen in self._seen:
                return False
            self._seen.add(seen)
        self.count(device, view, name)
        return True

    def note(self, message: str) -> None:
        """Keep one line worth reporting (a failed kernel, a discarded read)."""
        with self._lock:
            self._notes.append(message)

    def command(self, device: str, argv: Sequence[str]) -> None:
        """Keep one compiler command a compile ran on `device` (a `CompilerCommand`)."""
        with self._lock:
            self._commands.append(CompilerCommand(device, tuple(argv)))

    def miss(self, device: str, view: str, explanation: MissExplanation) -> None:
        """Count one explained miss under its reason (`misses`) and keep the explanation."""
        with self._lock:
            self._misses.append(explanation)
        self.count(device, view, MISS + explanation.reason)

    def reader(self) -> StatisticsReader:
        return StatisticsReader(self)

    def _snapshot(
        self,
    ) -> tuple[dict[str, DeviceStatistics], list[str], list[MissExplanation]]:
        with self._lock:
            out = {
                device: DeviceStatistics(
                    CompilationStatistics(**_fields(CompilationStatistics, views["compilation"])),
                    AutotuneStatistics(**_fields(AutotuneStatistics, views["autotune"])),
                    ExecutionStatistics(**_fields(ExecutionStatistics, views["execution"])),
                )
                for device, views in self._counts.items()
            }
            return out, list(self._notes), list(self._misses)


def _fields(cls: type, counter: Counter[str]) -> dict[str, object]:
    names = {f.name: f.type for f in dataclasses.fields(cls) if f.name != "misses"}
    misses = {k[len(MISS) :]: int(v) for k, v in sorted(counter.items()) if k.startswith(MISS)}
    unknown = set(counter) - set(names) - {MISS + k for k in misses}
    if unknown:
        raise KeyError(f"{cls.__name__} has no counter {sorted(unknown)}")
    out: dict[str, object] = {
        name: (float(counter.get(name, 0)) if kind == "float" else int(counter.get(name, 0)))
        for name, kind in names.items()
    }
    if misses:
        out["misses"] = misses
    return out


class StatisticsReader:
    """Reads a collector's counts from any thread, as consistent snapshots."""

    def __init__(self, collector: StatisticsCollector) -> None:
        self._collector = collector

    def per_device(self) -> dict[str, DeviceStatistics]:
        return self._collector._snapshot()[0]

    def total(self) -> DeviceStatistics:
        total = DeviceStatistics()
        for stats in self.per_device().values():
            total = total + stats
        return total

    def notes(self) -> list[str]:
        return self._collector._snapshot()[1]

    def misses(self) -> list[MissExplanation]:
        """Every explained miss so far, in the order they happened."""
        return self._collector._snapshot()[2]

    def commands(self) -> list[CompilerCommand]:
        """Every compiler command so far, in the order they ran."""
        with self._collector._lock:
            return list(self._collector._commands)

    @property
    def compilation(self) -> CompilationStatistics:
        return self.total().compilation

    @property
    def autotune(self) -> AutotuneStatistics:
        return self.total().autotune

    @property
    def execution(self) -> ExecutionStatistics:
        return self.total().execution
