"""Counts of what a pass triggered, per device, readable from any thread.

The code doing the work (compile queue, tune cache, launch path) counts into a
`StatisticsCollector`; a `StatisticsReader` takes consistent snapshots of it from any thread
while a pass runs (progress bars poll one). Snapshots are frozen records
(`warmcli.records.Record`): `CompilationStatistics`, `AutotuneStatistics`,
`ExecutionStatistics` per device, made by `warmcli.execution.snapshots` (imported on the first
snapshot: a process that only counts, as one that serves, never makes one). A miss a bundle
could not serve (a `warmcli.records.MissExplanation`) is counted by the reason
`warmcli.runtime.explain` gives (the `misses` mapping, reason to count) and kept whole.

Kernels and tunes are counted through a `Registration` (the seed's, CubeCL's
`execution/statistics.rs`): a key registers once per collector and owner (a runtime's kernel cache
or tunes: one made anew, after `use_bundle` closed the last, counts what it does anew; the keys of
one gone are let go), with the collector of the override open then, and *settles* there exactly
once, wherever and whenever that is, even after that override closed: a kernel `compiled`, `loaded`,
`failed` or `abandoned` (dropped before settling: its batch raised, its runtime closed); a tune
`measured`, `failed`, `pending` (warm's: its device cannot execute, the measuring waits for one that
can) or `abandoned`. One abandoned and then done after all (a compile or tune a Ctrl-C cut short in
a session, done again at its next call) settles again, as it ended: it is counted abandoned no more.
Afterwards a kernel may be `refused` by the device at load and `stored` into the bundle
(`ptx_stored`: its PTX too), a tune `persisted`, each counted once per registration. So one
collector read after its work is done gives `settled == registered`. A `Registrations` holds one
owner's registrations by key (a device's kernel cache, a runtime's tunes) so that it can settle them
later. The collector owns the counters and a lock; it never decides what is counted, and never
prints.
"""

from __future__ import annotations

import itertools
import weakref
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from warmcli.forking import new_lock
from warmcli.records import CompilerCommand, MissExplanation

if TYPE_CHECKING:  # a reader's records (`warmcli.execution.snapshots`): imported on first read
    from warmcli.execution.snapshots import (
        AutotuneStatistics,
        CompilationStatistics,
        DeviceStatistics,
        ExecutionStatistics,
    )

MISS = "misses."  # counter-name prefix of a miss's reason


KERNEL_OUTCOMES = ("compiled", "loaded", "failed", "abandoned")
KERNEL_LATER = ("refused", "stored", "ptx_stored")
TUNE_OUTCOMES = ("measured", "failed", "pending", "abandoned")
TUNE_LATER = ("persisted",)

_VIEWS = ("compilation", "autotune", "execution")
_OWNERS = itertools.count(1)  # each `Registrations` its own number (0: a key registered alone)


class StatisticsCollector:
    """Thread-safe counters, per device and per view (`compilation`, `autotune`, `execution`)."""

    def __init__(self) -> None:
        self._lock = new_lock(self)
        self._counts: dict[str, dict[str, Counter[str]]] = {}
        self._notes: list[str] = []
        self._commands: list[CompilerCommand] = []
        self._misses: list[MissExplanation] = []
        self._seen: dict[
            tuple[str, str, int], set[str]
        ] = {}  # by device, view, owner: no tuple a key

    def count(self, device: str, view: str, name: str, amount: float = 1) -> None:
        """Add `amount` to one counter; `view` is one of the three statistics kinds."""
        if view not in _VIEWS:
            raise ValueError(f"unknown statistics view {view!r}")
        with self._lock:
            self._add(device, view, name, amount)

    def _add(self, device: str, view: str, name: str, amount: float = 1) -> None:
        """`count`, under the lock already held (a registration counts as it changes)."""
        views = self._counts.get(device)
        if views is None:  # built once per device, not on every count (a launch counts)
            views = self._counts[device] = {v: Counter() for v in _VIEWS}
        views[view][name] += amount

    def register(
        self, device: str, view: str, key: str, outcome: str | None = None, owner: int = 0
    ) -> Registration | None:
        """Register the kernel (`compilation`) or tune (`autotune`) `key` here; None when
        this collector registered it already (a key registers once per collector and owner,
        `Registrations.owner`: a runtime made anew, by a session's `use_bundle` run again,
        compiles or loads it anew, and is counted). With
        `outcome`, its registration is settled so under the same hold of the lock: a key
        obtained and done at once (a kernel the bundle serves as it is asked for)."""
        if view not in _OUTCOMES:
            raise ValueError(f"nothing registers in statistics view {view!r}")
        if outcome is not None and outcome not in _OUTCOMES[view]:
            raise ValueError(f"{view} has no outcome {outcome!r}")
        new = self._new(device, view, key, outcome, owner)
        return Registration(self, device, view, outcome) if new else None

    def _new(self, device: str, view: str, key: str, outcome: str | None, owner: int) -> bool:
        """Count `key` registered (and `outcome`, if any) unless registered here already; if
        it was new. One frame, one hold of the lock (a served kernel registers each)."""
        with self._lock:
            at = (device, view, owner)
            seen = self._seen.get(at) or self._seen.setdefault(at, set())
            if key in seen:
                return False
            seen.add(key)
            views = self._counts.get(device)
            if views is None:
                views = self._counts[device] = {v: Counter() for v in _VIEWS}
            counter = views[view]
            counter["registered"] += 1
            if outcome is not None:
                counter[outcome] += 1
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

    def _snapshot(self) -> dict[str, DeviceStatistics]:
        from warmcli.execution.snapshots import snapshot  # (a reader's records: on first read)

        with self._lock:
            return snapshot(self._counts, MISS)

    def _copied(self, held: list[Any]) -> list[Any]:
        """One of the collector's lists (notes, misses, commands), copied under its lock."""
        with self._lock:
            return list(held)


_OUTCOMES = {"compilation": KERNEL_OUTCOMES, "autotune": TUNE_OUTCOMES}
_LATER = {"compilation": KERNEL_LATER, "autotune": TUNE_LATER}


class Registration:
    """One kernel or tune registered with a collector: counted there once it settles,
    and what happens to it afterwards counted there once each."""

    __slots__ = ("_collector", "_device", "_later", "_view", "outcome")

    def __init__(
        self, collector: StatisticsCollector, device: str, view: str, outcome: str | None = None
    ) -> None:
        self._collector, self._device, self._view = collector, device, view
        self.outcome: str | None = outcome  # settled as it registered, or None
        self._later: set[str] | None = None  # made at the first (most never have one)

    def settle(self, outcome: str) -> bool:
        """Count how it ended; False (nothing counted) if it had settled already."""
        if outcome not in _OUTCOMES[self._view]:
            raise ValueError(f"{self._view} has no outcome {outcome!r}")
        collector = self._collector
        with collector._lock:
            if self.outcome is not None:
                if self.outcome != "abandoned" or outcome == "abandoned":
                    return False
                collector._add(self._device, self._view, "abandoned", -1)  # done after all
            self.outcome = outcome
            collector._add(self._device, self._view, outcome)
        return True

    def record(self, later: str) -> bool:
        """Count `later` (refused, stored, persisted) once however often it is told."""
        if later not in _LATER[self._view]:
            raise ValueError(f"{self._view} has no {later!r}")
        collector = self._collector
        with collector._lock:
            if self._later is None:
                self._later = set()
            elif later in self._later:
                return False
            self._later.add(later)
            collector._add(self._device, self._view, later)
        return True


def _forget_owner(
    collectors: Iterable[StatisticsCollector], device: str, view: str, owner: int
) -> None:
    """Forget the keys `owner` registered in each of `collectors`, as it is gone (a finalizer,
    run in whatever thread collects it: no lock taken, one atomic `dict.pop` each)."""
    for collector in list(collectors):
        collector._seen.pop((device, view, owner), None)


class Registrations:
    """The registrations one owner made, by key, in every collector: what lets a kernel
    queued under one override settle to that override's collector when a later one
    compiles it. Thread-safe."""

    def __init__(self, device: str, view: str) -> None:
        self.device, self.view = device, view
        self._outcomes = _OUTCOMES.get(view, ())  # an outcome registering here settles as
        self._lock = new_lock(self)
        # By key: its one registration (most keys register once), or a list of them; a
        # settled one registered so at once held as (collector, outcome) (`_settled_of`).
        self._open: dict[str, Registration | list[Registration]] = {}
        self._settled: dict[str, Registration | list[Registration] | tuple[Any, str]] = {}
        self._pair: tuple[Any, str] = (None, "")  # the last (collector, outcome) held so
        self.owner = next(_OWNERS)  # what a collector registers a key once for
        # The collectors it registered with, which let its keys go with it (no owner gone
        # registers again: a process taking its bundle anew holds the live runtime's alone).
        self._with: weakref.WeakSet[StatisticsCollector] = weakref.WeakSet()
        forget = weakref.finalize(self, _forget_owner, self._with, device, view, self.owner)
        forget.atexit = False  # (at exit, before its atexit write-back: none forgotten)
        self._added: StatisticsCollector | None = None  # the last added to `_with`

    def register(self, collector: StatisticsCollector, key: str) -> bool:
        """Register `key` with `collector` unless it did already; True if it was new."""
        registration = collector.register(self.device, self.view, key, owner=self.owner)
        if registration is None:
            return False
        self._with.add(collector)
        with self._lock:
            held = self._open.get(key)
            self._open[key] = registration if held is None else [*_each(held), registration]
        return True

    def register_settled(self, collector: StatisticsCollector, key: str, outcome: str) -> None:
        """`register(collector, key)` then `settle(key, outcome)`, in one step: a key obtained
        and done at once (a kernel the bundle serves: one call per kernel served). Held as
        (collector, outcome), made a `Registration` only if asked for (`_settled_of`)."""
        if outcome not in self._outcomes:  # raises the error naming it
            collector.register(self.device, self.view, key, outcome)
        new = collector._new(self.device, self.view, key, outcome, self.owner)
        if new and collector is not self._added:  # (a served kernel's: no WeakSet.add each)
            self._with.add(collector)  # (first: a Ctrl-C in it leaves the next key to add it)
            self._added = collector
        with self._lock:
            done = self._open.pop(key, None)
            if done is None and key not in self._settled:  # a key seen the first time
                if new:  # one (collector, outcome) shared by the keys held so: none made a key
                    if self._pair[0] is not collector or self._pair[1] != outcome:
                        self._pair = (collector, outcome)
                    self._settled[key] = self._pair
                return
            mine = (Registration(collector, self.device, self.view, outcome),) if new else ()
            held = [*_each(self._settled_of(key)), *_each(done), *mine]
            self._settled[key] = held[0] if len(held) == 1 else held
        for registration in _each(done):
            registration.settle(outcome)

    def _settled_of(self, key: str) -> Registration | list[Registration] | None:
        """`key`'s settled registrations (under the lock), (collector, outcome) made one."""
        held = self._settled.get(key)
        if type(held) is tuple:
            held = self._settled[key] = Registration(held[0], self.device, self.view, held[1])
        return held  # type: ignore[return-value]

    def settle(self, keys: str | Iterable[str], outcome: str) -> None:
        """Settle every open registration of `keys` (one key or many) as `outcome`, and, as
        another outcome, every one that was abandoned (done after all: compiled or measured
        again after a Ctrl-C)."""
        for key in (keys,) if isinstance(keys, str) else keys:
            with self._lock:
                done = self._open.pop(key, None)
                if done is None:  # none open: those abandoned, if it is done after all
                    done = self._redone(key, outcome)
                else:
                    held = self._settled_of(key)
                    self._settled[key] = done if held is None else [*_each(held), *_each(done)]
            for registration in _each(done):
                registration.settle(outcome)

    def _redone(self, key: str, outcome: str) -> list[Registration]:
        """`key`'s abandoned registrations (under the lock), to settle as `outcome`: none for
        another abandoning, nor of a key held as (collector, outcome), served at once."""
        held = self._settled.get(key)
        if outcome == "abandoned" or held is None:
            return []
        if type(held) is tuple and held[1] != "abandoned":
            return []
        return [r for r in _each(self._settled_of(key)) if r.outcome == "abandoned"]

    def record(self, keys: str | Iterable[str], later: str) -> None:
        """Count `later` once on every registration of `keys`, settled or open."""
        for key in [keys] if isinstance(keys, str) else keys:
            with self._lock:
                held = [*_each(self._settled_of(key)), *_each(self._open.get(key))]
            for registration in held:
                registration.record(later)

    def abandon(self) -> None:
        """Settle every registration still open as abandoned (its owner goes away)."""
        with self._lock:
            keys = list(self._open)
        self.settle(keys, "abandoned")


def _each(held: Registration | list[Registration] | None) -> Sequence[Registration]:
    """A key's registrations as `Registrations` holds them: none, one, or a list."""
    return () if held is None else (held,) if type(held) is Registration else held  # type: ignore[return-value]


class StatisticsReader:
    """Reads a collector's counts from any thread, as consistent snapshots."""

    def __init__(self, collector: StatisticsCollector) -> None:
        self._collector = collector

    def per_device(self) -> dict[str, DeviceStatistics]:
        return self._collector._snapshot()

    def total(self) -> DeviceStatistics:
        from warmcli.execution.snapshots import DeviceStatistics

        return sum(self.per_device().values(), DeviceStatistics())

    def notes(self) -> list[str]:
        return self._collector._copied(self._collector._notes)

    def misses(self) -> list[MissExplanation]:
        """Every explained miss so far, in the order they happened."""
        return self._collector._copied(self._collector._misses)

    def commands(self) -> list[CompilerCommand]:
        """Every compiler command so far, in the order they ran."""
        return self._collector._copied(self._collector._commands)

    @property
    def compilation(self) -> CompilationStatistics:
        return self.total().compilation

    @property
    def autotune(self) -> AutotuneStatistics:
        return self.total().autotune

    @property
    def execution(self) -> ExecutionStatistics:
        return self.total().execution
