"""A collector's counts as its readers see them: the records a `StatisticsReader` hands out.

`CompilationStatistics`, `AutotuneStatistics` and `ExecutionStatistics` (one device's three
views, `DeviceStatistics`; sums of devices with `+`) are frozen records
(`warmcli.records.Record`) made from a `warmcli.execution.statistics.StatisticsCollector`'s
counters, consistently, under its lock, for a `StatisticsReader` (from any thread: progress
bars poll one while a pass runs). Only a reader needs them, never the code that counts: a
process that serves and reads no statistics never imports this module (the collector
imports it on its first snapshot). It owns no state and never prints.
"""

from __future__ import annotations

from collections import Counter

from warmcli.records import Record, factory, field_types


class CompilationStatistics(Record):
    """Kernels: registered, then settled once as compiled, loaded (served by a bundle), failed
    or abandoned (its batch raised, its runtime closed first); of those, refused by the device
    at load, stored into the bundle (`ptx_stored`: the PTX kept beside it too). Queued, batches."""

    registered: int = 0
    queued: int = 0
    compiled: int = 0
    loaded: int = 0
    ptx_jit: int = 0  # of `loaded`: PTX the driver JITs (a GPU newer than every cubin)
    failed: int = 0
    abandoned: int = 0
    refused: int = 0
    stored: int = 0
    ptx_stored: int = 0
    batches: int = 0
    compiler_processes: int = 0
    seconds: float = 0.0
    misses: dict[str, int] = factory(dict)

    @property
    def settled(self) -> int:
        """The kernels done, however they ended: never more than `registered`."""
        return self.compiled + self.loaded + self.failed + self.abandoned


class AutotuneStatistics(Record):
    """Tunes: registered (gathered, or reached to be measured), then settled once as
    measured, failed (every candidate did), pending (a device that cannot execute) or
    abandoned; of those, persisted. A hit (a measured pick held) and a key with one
    candidate (answered, not tuned) register nowhere; hits are counted apart.

    `unrecorded` counts tunes a `CompileOnly` pass reached that had no record at all
    (neither measured nor pending) here or in the bundle.
    """

    registered: int = 0
    measured: int = 0
    failed: int = 0
    pending: int = 0
    abandoned: int = 0
    hits: int = 0
    persisted: int = 0
    unrecorded: int = 0
    candidates_registered: int = 0
    candidates_measured: int = 0
    candidates_failed: int = 0
    seconds: float = 0.0
    misses: dict[str, int] = factory(dict)

    @property
    def settled(self) -> int:
        """The tunes done, however they ended: never more than `registered`."""
        return self.measured + self.failed + self.pending + self.abandoned


class ExecutionStatistics(Record):
    """Launches: run, compiled and discarded, only queued."""

    executed: int = 0
    discarded: int = 0
    queued: int = 0
    discarded_reads: int = 0


class DeviceStatistics(Record):
    """All three views of one device."""

    compilation: CompilationStatistics = factory(CompilationStatistics)
    autotune: AutotuneStatistics = factory(AutotuneStatistics)
    execution: ExecutionStatistics = factory(ExecutionStatistics)

    def __add__(self, other: DeviceStatistics) -> DeviceStatistics:
        views = field_types(self)  # its fields: the three views
        return DeviceStatistics(*(_add(getattr(self, f), getattr(other, f)) for f in views))


def _add(a: Record, b: Record) -> object:
    return type(a)(**{name: _sum(getattr(a, name), getattr(b, name)) for name in field_types(a)})


def _sum(x: object, y: object) -> object:
    if isinstance(x, dict) and isinstance(y, dict):
        return dict(sorted((Counter(x) + Counter(y)).items()))
    return x + y  # type: ignore[operator]


def snapshot(counts: dict[str, dict[str, Counter[str]]], miss: str) -> dict[str, DeviceStatistics]:
    """Each device's records of its counters (a collector's, read under its lock), the
    counters named `miss` + a reason gathered into each view's `misses`."""
    return {
        device: DeviceStatistics(
            CompilationStatistics(**_fields(CompilationStatistics, views["compilation"], miss)),
            AutotuneStatistics(**_fields(AutotuneStatistics, views["autotune"], miss)),
            ExecutionStatistics(**_fields(ExecutionStatistics, views["execution"], miss)),
        )
        for device, views in counts.items()
    }


def _fields(cls: type[Record], counter: Counter[str], miss: str) -> dict[str, object]:
    names = {name: kind for name, kind in field_types(cls).items() if name != "misses"}
    misses = {k[len(miss) :]: int(v) for k, v in sorted(counter.items()) if k.startswith(miss)}
    unknown = set(counter) - set(names) - {miss + k for k in misses}
    if unknown:
        raise KeyError(f"{cls.__name__} has no counter {sorted(unknown)}")
    out: dict[str, object] = {
        name: (float(counter.get(name, 0)) if kind == "float" else int(counter.get(name, 0)))
        for name, kind in names.items()
    }
    if misses:
        out["misses"] = misses
    return out
