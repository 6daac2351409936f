"""Tunable operations, their tune keys, and the tune cache of one device.

A `Tunable` declares its candidates (one kernel variant each) and how to launch a candidate on its
inputs; its tune key is the operation's name, a key derived from the inputs' shapes and dtypes
(optionally bucketed to powers of two), the device fingerprint and a checksum of the candidate set
(each kernel with the headers its key covers) and of the output check, if any (with the launch
function the check judged), so adding or renaming a candidate, editing its kernel or a header, or
changing the check or a checked tunable's launch function, invalidates old picks
(`warmcli.runtime.tune_spec` renders what keys a tune as text). On a miss a tune measures every
candidate (warm-up, then repeats, median) on the stream it measures on, switched to `Execute` by a
`StreamModeOverride`, as is every other stream of the device for the measuring thread (what a launch
function launches on a stream of its own is the candidate's work, timed with it), with the buffers
it may write kept and put back after every run
(`warmcli.runtime.tune_guard`), so the caller's data is as it was; a candidate that fails to
compile, raises any exception, fails the tunable's output check, or crashed an earlier `warm run`
worker (as the installed `MeasureJournal` says: `warm run`'s crash isolation installs one in its
worker; the default journals nothing) is excluded with its reason; the fastest wins and every
measurement is kept (on a device that cannot execute, `--arch`, each candidate's launch runs once
discarded, checked as a GPU would check it, by `warmcli.runtime.tune_check`: one it refuses is
excluded, the others pending). A check that told no candidate apart (`judged_nothing`) is noted.
`measure` is handed the device, its `CandidateKernels` (the kernel cache) and a `CandidateRun` (a
candidate's launch), never the runtime; the seconds it counts leave out every kernel's compile or
load inside the measuring (`warmcli.runtime.tune_clock`: compilation's seconds count a compile).
The `TuneCache` owns the records of one device: those measured here, and the last `TUNES_KEPT` it
read from the bundle on demand (no sample made; a malformed row is no record: it remembers what is
wrong, for the runtime to explain the miss as `corrupt`), the tunes all of whose candidates failed
here (`failed`) and those no bundle serves (`never`: a candidate unkeyed); it writes no bundle.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import math
import operator
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

from warmcli.backends.base import Buffer, Device, Stream, StreamMode
from warmcli.errors import BundleError, KernelCompileError, TuneFailure, TuneSpecError, headline
from warmcli.execution.process_mode import active_collector, note_reported
from warmcli.forking import new_lock
from warmcli.kernel import Kernel, included_headers
from warmcli.printable import cut
from warmcli.records import CandidateMeasurement, Record, TuneRecord, derived, tune_key
from warmcli.runtime.recent import TUNES_KEPT, Recent
from warmcli.runtime.tune_spec import check_names, check_spec, fits, inputs_text, key_text

if TYPE_CHECKING:
    from warmcli.runtime.store import Store
    from warmcli.runtime.tune_clock import CandidateKernels
    from warmcli.runtime.tune_guard import TuneGuard

LaunchCandidate = Callable[..., None]
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class Tunable(Record):
    """An operation with several candidate kernels, one of which is picked per shape."""

    name: str
    candidates: Mapping[str, Kernel]
    launch: LaunchCandidate
    key: Callable[..., Hashable] | None = None
    bucket: str | None = None
    warmup: int = 1
    repeats: int = 5
    restore: Sequence[int | str] | Callable[..., Iterable[Buffer]] | None = None
    check: str | Callable[..., Any] | None = None
    check_tolerance: tuple[float, float] = (1e-5, 1e-6)
    checksum: str = derived("")
    restore_positions: tuple[int, ...] = derived(())

    def __post_init__(self) -> None:
        object.__setattr__(self, "candidates", check_names(self.name, self.candidates, Kernel))
        if self.bucket not in (None, "pow2"):
            raise ValueError(f"tunable {self.name}: bucket must be None or 'pow2'")
        for arg, least, what in (("warmup", 0, "launches"), ("repeats", 1, "timed launches")):
            value = getattr(self, arg)
            whole = hasattr(type(value), "__index__") and not isinstance(value, bool)
            number = operator.index(value) if whole else None  # numpy's ints too
            if number is None or number < least:
                raise TuneSpecError(
                    f"tunable {self.name}: {arg} is {value!r}: give {least} or more {what}"
                )
            object.__setattr__(self, arg, number)  # a plain int from here on
        check_spec(self)  # its samples, key=, restore=, launch and bucket
        if isinstance(self.check, str) and self.check not in self.candidates:
            raise ValueError(
                f"tunable {self.name}: check names {self.check!r}, which is no candidate "
                f"(candidates: {', '.join(self.candidates)})"
            )
        if self.check is not None and not isinstance(self.check, str) and not callable(self.check):
            raise ValueError(f"tunable {self.name}: check is a candidate's name or a callable")
        try:  # a pair in order: no text (its characters), no set
            if isinstance(self.check_tolerance, str | bytes | bytearray | set | frozenset):
                raise TypeError
            rtol, atol = (float(t) for t in self.check_tolerance)
        except (TypeError, ValueError):
            rtol = atol = math.nan
        if not (0 <= rtol < math.inf and 0 <= atol < math.inf):
            raise TuneSpecError(f"tunable {self.name}: check_tolerance is (rtol, atol), two "
                                f"finite numbers >= 0, not {self.check_tolerance!r}")  # fmt: skip
        object.__setattr__(self, "check_tolerance", (rtol, atol))
        if self.restore is not None and not callable(self.restore):
            positions = tuple(self._input_position(r) for r in self.restore)
            object.__setattr__(self, "restore_positions", positions)
        payload: Any = sorted(  # a candidate's headers too (`warmcli.headers`), where it has any
            (name, k.content_hash + (f"+{h}" if (h := included_headers(k)) else ""))
            for name, k in self.candidates.items()
        )
        if self.check is not None:  # a tunable without a check keys as it always has
            from warmcli.runtime.check_keys import judged_identity  # (a checked one's only)

            payload = [payload, *judged_identity(self.check, self.check_tolerance, self.launch)]
        digest = hashlib.sha256(json.dumps(payload).encode()).hexdigest()
        object.__setattr__(self, "checksum", digest)

    def _input_position(self, which: int | str) -> int:
        """`restore`'s entry as a position among the inputs (0-based): an input's
        position (from 0) or the name of the launch function's parameter that takes it."""
        if isinstance(which, bool) or not isinstance(which, int | str):
            raise ValueError(f"tunable {self.name}: restore takes input positions or names")
        if isinstance(which, int):
            if which < 0:
                raise ValueError(f"tunable {self.name}: restore position {which} is negative")
            return which
        try:
            params = list(inspect.signature(self.launch).parameters.values())[2:]
        except (TypeError, ValueError):
            params = []
        names = [p.name for p in params if p.kind in _POSITIONAL]
        if which not in names:
            raise ValueError(
                f"tunable {self.name}: restore names {which!r}, which is not a positional "
                f"input of its launch function (inputs: {', '.join(names) or 'none named'})"
            )
        return names.index(which)

    def shape_key(self, inputs: tuple[Any, ...]) -> str:
        """The inputs' part of the tune key, as stable text a bundle's row holds (`fits`)."""
        if self.key is None:
            return fits(self.name, inputs_text(self.name, inputs, self.bucket))
        return fits(self.name, key_text(self.name, self.key(*inputs)))

    def tune_key(self, shape_key: str, device_identity: str) -> str:
        return tune_key(self.name, shape_key, device_identity, self.checksum)

    def __hash__(self) -> int:  # a key of `functools.lru_cache` or a set, alike for its equals
        return hash((self.name, self.checksum))  # (its candidates, a mapping, have no hash)


class TuneCache:
    """A device's tune records: those measured here, the last `TUNES_KEPT` the bundle served."""

    def __init__(self, device_id: str, bundle: Store | None = None) -> None:
        self.device_id, self.bundle = device_id, bundle
        self._lock = new_lock(self)
        self._records: dict[str, TuneRecord] = {}  # measured here: kept for the process
        self._served: Recent[TuneRecord] = Recent(TUNES_KEPT)  # read from the bundle
        self._new: dict[str, TuneRecord] = {}
        self._corrupt: dict[str, str] = {}  # key -> what is wrong with the bundle's row
        self.failed: dict[str, str] = {}  # key -> label: every candidate failed here, no record
        self.never: dict[str, tuple[str, str]] = {}  # key -> label, why: never served nor stored

    def get(self, key: str) -> TuneRecord | None:
        """The record under `key`; None for none, or the bundle's malformed (`corrupt`)."""
        with self._lock:
            record = self._records.get(key) or self._served.get(key)
        if record is None and self.bundle is not None:
            try:
                record = self.bundle.tune(key, samples=False)
            except BundleError as exc:
                with self._lock:
                    self._corrupt[key] = exc.problem
                return None
            if record is not None:
                with self._lock:
                    self._served.put(key, record := record.served())  # (no sample kept)
        return record

    def corrupt(self, key: str) -> str | None:
        """What is wrong with the bundle's row under `key`, if `get` found it malformed."""
        with self._lock:
            return self._corrupt.get(key)

    def measured_here(self, key: str) -> bool:
        """Whether this process measured the record under `key` (`put`), not the bundle."""
        return key in self._records

    def put(self, record: TuneRecord) -> None:
        with self._lock:
            self._records[record.key] = record
            self._new[record.key] = record  # (but one `never` served: never stored)
            self.failed.pop(record.key, None)

    def unpersisted(self) -> list[TuneRecord]:
        with self._lock:
            return [record for key, record in self._new.items() if key not in self.never]

    def mark_persisted(self, keys: list[str]) -> None:
        with self._lock:
            for key in keys:
                self._new.pop(key, None)


if TYPE_CHECKING:  # structural types, for annotations only: no Protocol made at import

    class CandidateRun(Protocol):
        """Launch one candidate of a tune on its inputs, on `stream` (`Tunable.launch`, bound)."""

        def __call__(self, kernel: Kernel, inputs: tuple[Any, ...], stream: Stream) -> None: ...

    class MeasureJournal(Protocol):
        """What is told of each candidate measured, and says which ones crashed before."""

        def excluded(self, tune_key: str, candidate: str) -> str | None:
            """Why this candidate is excluded from its tune, or None."""

        def measuring(
            self, tune_key: str, operation: str, shape_key: str, candidate: str
        ) -> AbstractContextManager[object]:
            """The span of one candidate's measurement."""


class _NoJournal:
    """The default: no candidate excluded, nothing journaled."""

    def excluded(self, tune_key: str, candidate: str) -> str | None:
        return None

    def measuring(
        self, tune_key: str, operation: str, shape_key: str, candidate: str
    ) -> AbstractContextManager[object]:
        return contextlib.nullcontext()


_journal: MeasureJournal = _NoJournal()


def set_measure_journal(journal: MeasureJournal | None) -> None:
    """Install the journal every later measurement reports to (None: the default)."""
    global _journal
    _journal = journal if journal is not None else _NoJournal()


def _count(device: str, name: str, amount: float = 1) -> None:
    active_collector().count(device, "autotune", name, amount)


def _measure_candidates(
    kernels: CandidateKernels,
    launch: CandidateRun,
    tunable: Tunable,
    inputs: tuple[Any, ...],
    guard: TuneGuard | None,
    stream: Stream,
    key: str,
    shape_key: str,
) -> list[CandidateMeasurement]:
    """Every candidate's measurement, in order, on the guard's device and stream (none executes
    without one); one failing to compile, raising or failing the check is excluded, with why."""
    from warmcli.execution.stream_mode import StreamModeOverride  # on first use: a hot start
    from warmcli.runtime.tune_check import check_candidate, checked, reference_failed
    from warmcli.runtime.tune_clock import timed_samples
    from warmcli.runtime.tune_guard import OutputCheck, last_line  # tunes nothing, as `measure`

    journal = _journal
    check = None
    if guard is not None and tunable.check is not None:
        check = OutputCheck(tunable.check, tunable.check_tolerance, inputs, guard)
    order = sorted(tunable.candidates, key=lambda n: n != tunable.check)  # reference first
    results: dict[str, CandidateMeasurement] = {}
    for name in order:
        kernel = tunable.candidates[name]
        kernel_key = kernels.key(kernel)
        try:
            kernels.get(kernel)
        except KernelCompileError as exc:
            results[name] = CandidateMeasurement(name, kernel_key, "failed", reason=exc.log.strip())
            continue
        if guard is None:  # its arguments and sizes checked as a GPU would (`tune_check`)
            refused = reference_failed(tunable.check, results)
            run = lambda k=kernel: launch(k, inputs, stream)  # noqa: E731
            status, reason = check_candidate(run, stream, refused)
            results[name] = CandidateMeasurement(name, kernel_key, status, reason=reason)
            continue
        crashed = journal.excluded(key, name)
        if crashed is not None:
            results[name] = CandidateMeasurement(name, kernel_key, "failed", reason=crashed)
            note_reported(f"tune {tunable.name} {shape_key}: candidate {name} {crashed}")
            continue

        def run(kernel: Kernel = kernel, stream: Stream = guard.stream) -> None:
            launch(kernel, inputs, stream)

        try:
            with (
                journal.measuring(key, tunable.name, shape_key, name),
                StreamModeOverride(guard.stream, StreamMode.EXECUTE, every_stream=True),
            ):
                problem = check.verdict(name, run) if check is not None else None
                if problem is None:
                    samples = timed_samples(guard, tunable.warmup, tunable.repeats, run)
        except Exception as exc:  # any exception of a candidate excludes it, with its reason
            guard.restore(running=True)  # (what it launched may still run on its own stream)
            problem = last_line(exc)
        if problem is not None:
            results[name] = CandidateMeasurement(name, kernel_key, "failed", reason=problem)
        else:
            # statistics.median, not imported: a workload's statistics.py may be first on sys.path
            ordered, half = sorted(samples), len(samples) // 2
            median = ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2
            results[name] = CandidateMeasurement(name, kernel_key, "ok", median, samples)
    if guard is None:
        checked(key)  # not again when it is reached again, pending (`check_pending`)
    if check is not None and (told := check.judged_nothing()) is not None:
        note_reported(f"tune {tunable.name} {cut(shape_key)}: {told}")  # report()'s too
    return [results[name] for name in tunable.candidates]


def measure(
    device: Device,
    kernels: CandidateKernels,
    launch: CandidateRun,
    tunable: Tunable,
    inputs: tuple[Any, ...],
    stream: Stream,
    key: str,
    shape_key: str,
) -> TuneRecord:
    """Measure every candidate on `stream` (switched to `Execute`), pick the fastest; `launch`
    runs one, `kernels` compiles them (on `device`). The buffers a candidate may write are put
    back after every run (`warmcli.runtime.tune_guard`): the inputs are as they were."""
    # Imported on first use: a process served from the bundle measures nothing.
    from warmcli.runtime.tune_clock import measuring_now
    from warmcli.runtime.tune_guard import TuneGuard, written_buffers

    kernels.flush()  # compile time is counted as compilation, not as measurement
    with measuring_now() as obtaining:  # nor is a compile or load inside it (`tune_clock`)
        started = time.perf_counter()
        guard = None
        if device.can_execute:
            restore, positions = tunable.restore, tunable.restore_positions
            guard = TuneGuard(
                device, stream, written_buffers(tunable.name, restore, positions, inputs)
            )
            guard.watch(inputs)
        try:
            found = _measure_candidates(
                kernels, launch, tunable, inputs, guard, stream, key, shape_key
            )
        finally:
            if guard is not None:
                try:  # (a candidate cut short may still run: the device is waited for)
                    guard.restore(running=True)
                finally:  # even where restoring raised: no cover is left for a dead guard
                    guard.release()
        seconds = time.perf_counter() - started - obtaining()
    ok = [c for c in found if c.status == "ok"]
    failed = [c for c in found if c.status == "failed"]
    _count(device.id, "candidates_failed", len(failed))
    if not device.can_execute and len(failed) < len(found):  # none runs: not pending
        status, pick = "pending", None
    elif not ok:
        reasons = "".join(f"\n- {c.name}: {headline(c.reason) or '?'}" for c in failed)
        raise TuneFailure(f"tune {tunable.name} {cut(shape_key)}: every candidate failed{reasons}")
    else:
        status = "measured"
        pick = min(ok, key=lambda c: c.seconds or 0.0).name
        _count(device.id, "candidates_measured", len(ok))
    _count(device.id, "seconds", seconds)
    return TuneRecord(
        key=key,
        operation=tunable.name,
        shape_key=shape_key,
        device=device.fingerprint.identity,
        checksum=tunable.checksum,
        status=status,
        pick=pick,
        candidates=tuple(found),
        seconds=seconds,
        measured_at=time.time(),
    )
