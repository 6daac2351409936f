"""The runtime a workload talks to: buffers, launches and tunes on one device.

A `Runtime` binds one `Device` to its `KernelCache` and `TuneCache` (both reading the bundle, if one
is loaded). A buffer holds numbers (`numeric_dtype`: no objects, strings or records, which a kernel
would crash on) in a shape of integer sizes; a launch's grid, block and shared size are integers
(numpy's too). Every launch resolves its `LaunchMode` here, where it is issued, from the process
mode and the mode of the stream it goes out on, and hands that verdict down (`kernels.obtain(kernel,
mode)`: queue the kernel, or obtain it to discard or execute the launch); the arguments of a launch
that is only queued or compiled are checked against the kernel's letters as an executed launch's are
(by the device), and its grid, block and shared size too, so a mistake shows in the first pass, and
an executed launch's before its kernel is loaded (`kernels.obtain(kernel, mode, args)`), so a wrong
one compiles nothing. A read of a buffer under a discarding process mode is refused
(`DiscardedReadError`), or warned about when the runtime allows it, because buffers are left as they
were. What the loaded bundle lacks (a kernel to compile, a tune to measure) goes through one miss
policy for both (`warmcli.runtime.misses`: explained once by `warmcli.runtime.explain`, counted,
refused in strict mode; `None` for the warming passes, where everything is a miss by design). What
was built and measured is written by `persist` (`warmcli.runtime.persist`). Memory the caller
already owns (PyCUDA's, or anything with `__cuda_array_interface__`) becomes a `Buffer` through
`wrap` (`warmcli.backends.cuda.foreign`). Given a `Shard` (the warming passes of `warm run
--shard`), the runtime measures only that shard's tunes and queues or compiles only the launched
kernels it owns (`warmcli.runtime.shard`), but those a tune's launch function launches while a
pre-build checks it (`warmcli.runtime.tune_check`: a GPU's measurement runs them); everything else
it skips. A tunable with a single candidate is answered with it, never measured nor registered.
A tune of a tunable with an unkeyed candidate (its key this process's own) is never stored.
A measured pick whose kernel is recorded as a build not served here as this process's (flags a
wrapper adds) is measured again, serving or warming (`_built_otherwise`: its timing and check were
of that binary; the verdict kept for the last `TUNES_KEPT`: `_kept`); one of another warm's build
recipe is served as it is, and measured again by a re-warm where that recipe is older. The runtime
never prints; it counts into the active `StatisticsCollector` (a note into the default one too:
`note_reported`), and holds its tunes' registrations (`tune_registrations`): a tune settles
measured, pending, failed or abandoned (its measuring raised, or the runtime closed with it still
gathered). A runtime whose warming passes ended is `retired`: a gate its launches and tunes ask
first (`warmcli.warming.ended`: a daemon thread's late launch is stopped there). Threads that miss
one tune at once measure it once: the others wait, then take its pick (`runtime.tune_flight`). A
served pick the launch function refuses, nothing executed yet by that thread (its count,
`executed`), is stale: measured again (`tune_served`). A buffer's shape and dtype and a launch's
configuration are read by `runtime.launch_sizes`. `can_build` answers a fast path a workload can
skip (`runtime.buildable`, imported on first use, as `runtime.tune_check` is)."""

from __future__ import annotations

from _thread import get_ident
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from warmcli.backends.base import Buffer, Device, Stream
from warmcli.backends.launch_args import Converter, any_buffer_of, converter
from warmcli.backends.toolchain import ToolchainError
from warmcli.errors import ArgumentError
from warmcli.execution.base import LaunchMode, resolve_launch_mode
from warmcli.execution.process_mode import ProcessMode, active_collector, current_process_mode
from warmcli.execution.statistics import Registrations
from warmcli.kernel import Kernel
from warmcli.records import TuneRecord
from warmcli.runtime.kernel_cache import KernelCache
from warmcli.runtime.launch_sizes import (
    buffer_shape,
    check_cuda_limits,
    launch_config,
    numeric_dtype,
)
from warmcli.runtime.misses import EXPLAIN, Misses, MissPolicy
from warmcli.runtime.misuse import discarded_read, refuse_device_data, refuse_wrong_kinds
from warmcli.runtime.persist import persist
from warmcli.runtime.recent import TUNES_KEPT, Recent
from warmcli.runtime.tune import Tunable, TuneCache, TuneFailure, measure
from warmcli.runtime.tune_flight import Flights
from warmcli.runtime.tune_served import Executed, launch_pick

if TYPE_CHECKING:
    from warmcli.runtime.shard import Shard
    from warmcli.runtime.store import Store


class Runtime:
    """One device, its caches and its default stream; see the module doc."""

    def __init__(
        self,
        device: Device,
        bundle: Store | None = None,
        *,
        jobs: int | None = None,
        compile_timeout: float | None = None,
        allow_discarded_reads: bool = False,
        misses: MissPolicy | None = EXPLAIN,
        shard: Shard | None = None,
    ) -> None:
        self.device = device
        self.shard = shard
        self.bundle = bundle
        self.misses = Misses(device, bundle, misses)  # kernels' and tunes' alike
        self.kernels = KernelCache(
            device,
            bundle,
            jobs=jobs,
            timeout=compile_timeout,
            misses=self.misses,
            any_toolchain=misses is not None,  # serving, not warming: any build that runs here
        )
        self.tunes = TuneCache(device.id, bundle)
        self.flights = Flights()  # the tune keys being measured (`warmcli.runtime.tune_flight`)
        self.tunes_cut: dict[str, str] = {}  # key -> label: its measuring interrupted
        self._kept: Recent[TuneRecord] = Recent(TUNES_KEPT)  # tune key -> its record, served
        self.tune_registrations = Registrations(device.id, "autotune")  # by key
        self.allow_discarded_reads = allow_discarded_reads
        self.default_stream = device.new_stream()
        self._checks: dict[tuple[str, str], Converter] = {}  # (content hash, name) -> checker
        self.retired: Callable[[str, Any, tuple[Any, ...], Stream | None], None] | None = None
        self.executed = Executed()  # launches executed, by thread (`tune_served`)

    @property
    def arch(self) -> str:
        return self.device.arch

    def can_build(self, kernel: Kernel) -> bool:
        """False where a launch of `kernel` raises `ToolchainError`: none builds or serves it."""
        refuse_wrong_kinds("rt.can_build", kernel=kernel)
        from warmcli.runtime.buildable import can_build  # asked, not launched: a hit never is

        return can_build(self.kernels, kernel)  # (with no compiler here, the build loaded)

    # -- buffers ---------------------------------------------------------------------------

    def buffer(self, shape: int | Sequence[int], dtype: str = "float32") -> Buffer:
        """A new device buffer (zeroed on the host; shape-only on a compile-only device)."""
        buffer = self.device.allocate(buffer_shape(shape), numeric_dtype(dtype))
        buffer.owned = True  # its memory goes with it (a tune holds such a buffer weakly)
        return buffer

    def upload(self, array: np.ndarray | Sequence[Any], dtype: str | None = None) -> Buffer:
        """A new buffer holding a copy of `array` (of numbers: `numeric_dtype`)."""
        refuse_device_data("upload", array)
        data = np.asarray(array, dtype=None if dtype is None else numeric_dtype(dtype))
        buffer = self.device.allocate(data.shape, numeric_dtype(data.dtype))
        buffer.owned = True
        self.device.upload(buffer, data)
        return buffer

    def wrap(
        self, obj: Any, shape: Sequence[int] | None = None, dtype: str | None = None
    ) -> Buffer:
        """Memory the caller already owns on this device as a `Buffer` for `launch`: a PyCUDA
        `DeviceAllocation` (bytes unless `shape`/`dtype` are given) or `GPUArray`, or anything
        with `__cuda_array_interface__` (CuPy, PyTorch, Numba arrays); the host device launches
        on its own buffers only (anything else refused: no host launch or read could use it)."""
        from warmcli.backends.cuda.foreign import wrap

        if self.device.backend != "cuda" and not isinstance(obj, Buffer):
            raise ArgumentError(
                f"rt.wrap: the {self.device.backend} device launches on its own buffers only, "
                f"not a {type(obj).__name__} (GPU memory): copy the data in with rt.upload"
            )
        return wrap(obj, self.device.id, shape, dtype)

    def read(self, buffer: Buffer) -> np.ndarray:
        """The buffer's contents; refused under a discarding process mode."""
        refuse_wrong_kinds("read", buffer=buffer)  # (not hot: a read synchronizes)
        if current_process_mode().discards:
            self.refuse_discarded_read(buffer, stacklevel=2)
            if not self.device.can_execute:
                return np.zeros(buffer.shape, dtype=buffer.dtype)
        self.default_stream.synchronize()
        return self.device.download(buffer)

    def refuse_discarded_read(self, what: str | Buffer, *, stacklevel: int = 1) -> None:
        """A read of `what` (a buffer, or a text naming it) under a discarding pass:
        `DiscardedReadError`, or when reads are allowed a `DiscardedReadWarning`, noted."""
        device, allowed = self.device, self.allow_discarded_reads
        discarded_read(what, device.id, device.can_execute, allowed, stacklevel)

    # -- launches --------------------------------------------------------------------------

    def stream(self) -> Stream:
        """A new stream on this device."""
        return self.device.new_stream()

    def synchronize(self) -> None:
        self.default_stream.synchronize()

    def launch(
        self,
        kernel: Kernel,
        *args: Any,
        grid: int | Sequence[int] = 1,
        block: int | Sequence[int] = 1,
        shared: int = 0,
        stream: Stream | None = None,
    ) -> LaunchMode:
        """Issue one launch; returns the verdict it was given."""
        if self.retired is not None:
            self.retired("launch", kernel, args, stream)
        try:
            stream = stream or self.default_stream
            verdict = resolve_launch_mode(current_process_mode(), stream.mode)
            collector = active_collector()
            if self.shard is not None and verdict is not LaunchMode.EXECUTE:
                from warmcli.runtime.tune_check import for_every_shard  # a tune's launch

                if not self.shard.owns(kernel.content_hash) and not for_every_shard():
                    return verdict  # another shard's (its launch function checked: a GPU runs it)
            if verdict is not LaunchMode.EXECUTE:  # checked as an executed launch's are
                self._check_arguments(kernel, args)
                checked = launch_config(grid, block, shared)
                if self.device.backend == "cuda":  # as a GPU would refuse it (none here)
                    check_cuda_limits(checked)
            function = self.kernels.obtain(kernel, verdict, args)  # checked before a load
            if verdict is LaunchMode.QUEUE:
                collector.count(self.device.id, "execution", "queued")
            elif verdict is LaunchMode.COMPILE:
                collector.count(self.device.id, "execution", "discarded")
            else:
                config = launch_config(grid, block, shared)
                hooks = stream.on_launch
                if hooks is not None:  # a tune measures on it: its buffers kept first
                    cover = hooks.get(get_ident()) or Stream.every_cover(hooks)
                    if cover is not None:
                        cover(args)
                self.device.launch(function, kernel, args, config, stream)
                self.executed.count += 1  # (a stale pick is measured again only before any)
                collector.count(self.device.id, "execution", "executed")
            return verdict
        except AttributeError:  # of the wrong kind? Said so; else the error stands
            refuse_wrong_kinds("launch", kernel=kernel, stream=stream)
            raise

    def _check_arguments(self, kernel: Kernel, args: tuple[Any, ...]) -> None:
        """A discarded or queued launch's arguments, checked as an executed one's (the device's)."""
        key = (kernel.content_hash, kernel.name)  # its letters and label: its checker's
        check = self._checks.get(key)
        if check is None:
            device = self.device.id
            check = self._checks[key] = converter(kernel, device, any_buffer_of(device))
        check(args)

    # -- tunes -----------------------------------------------------------------------------

    def tune(self, tunable: Tunable, *inputs: Any, stream: Stream | None = None) -> str | None:
        """Run the picked candidate on `inputs`, measuring first on a miss; returns the pick.
        Under `CompileOnly` a miss only queues every candidate's kernel (and returns None)."""
        if self.retired is not None:
            self.retired("tune", tunable, inputs, stream)
        stream = stream or self.default_stream
        if not isinstance(tunable, Tunable) or not isinstance(stream, Stream):
            refuse_wrong_kinds("tune", tunable=tunable, stream=stream)
        if len(tunable.candidates) == 1:  # answered, not tuned: counts nowhere
            return self._answer(tunable, *inputs, stream=stream)
        shape_key = tunable.shape_key(inputs)
        if self.shard is not None:
            from warmcli.runtime.shard import shard_checksum, tune_token  # (sharded warming)

            if not self.shard.owns(tune_token(tunable.name, shape_key, shard_checksum(tunable))):
                return None  # another shard's tune: never measured nor queued here
        key = tunable.tune_key(shape_key, self.device.fingerprint.identity)
        return self._keyed(tunable, inputs, stream, shape_key, key)

    def _keyed(
        self, tunable: Tunable, inputs: tuple[Any, ...], stream: Stream, shape_key: str, key: str
    ) -> str | None:
        """`tune` once keyed (and again once another thread measured the key: `tune_flight`)."""
        device_id = self.device.id
        collector = active_collector()
        record = self.tunes.get(key)
        measured = record is not None and record.status == "measured"
        built_otherwise = None  # a measured pick of another build than this process's
        go = lambda k: tunable.launch(self, k, *inputs, stream=stream)  # noqa: E731
        if (
            record is not None
            and measured
            and record.pick in tunable.candidates
            and self._built_otherwise(tunable, record)
        ):
            built_otherwise, record = record, None
        stale = None  # why the launch function refuses the bundle's pick here, if it does
        if record is not None and measured and record.pick in tunable.candidates:
            stale = launch_pick(self, tunable, record, inputs, stream)
            if stale is None:
                collector.count(device_id, "autotune", "hits")
                return record.pick
            record = None  # a stale pick (`warmcli.runtime.tune_served`): a miss, measured
        if current_process_mode() is ProcessMode.COMPILE_ONLY:
            gathering = record is None or self.device.can_execute  # for a pass that measures
            if gathering and self._register_tune(tunable, key) and record is None:
                collector.count(device_id, "autotune", "unrecorded")  # a tune, counted once
                self._unkeyed(tunable, key, shape_key)  # (no record would serve it: said so)
            elif record is not None and not gathering and record.status == "pending":
                self.tune_registrations.register_settled(collector, key, "pending")  # reached
                from warmcli.runtime.tune_check import check_pending  # (a pending tune's only)

                check_pending(record, tunable.candidates, go, stream, "queued")  # what they launch
            if record is None:  # a compile-only verify names it (once: the miss policy's)
                self.misses.tune(self.tunes, tunable, key, shape_key, built_otherwise, stale)
            # A kernel recorded failed under the key it has here is not due again (not so others).
            recorded = record.candidates if record is not None else ()
            failed = {c.kernel_key for c in recorded if c.status == "failed"}
            for kernel in tunable.candidates.values():
                if self.kernels.key(kernel) not in failed:
                    self.kernels.queue(kernel)
            return None
        elif record is not None and record.status == "pending" and not self.device.can_execute:
            self.kernels.flush()  # its candidates queued by the CompileOnly pass, built here
            from warmcli.runtime.tune_check import check_pending  # (a pending tune's only)

            check_pending(record, tunable.candidates, go, stream)  # and what they launch
            self.tune_registrations.register_settled(collector, key, "pending")  # reached
            return None
        else:
            with self.flights.measuring(key) as mine:  # one thread measures it, the others wait
                if not mine:  # for it, then look it up again, as a later call would
                    return self._keyed(tunable, inputs, stream, shape_key, key)
                earlier = record or built_otherwise
                self.misses.tune(self.tunes, tunable, key, shape_key, earlier, stale)
                self._register_tune(tunable, key)
                record = self._measure(tunable, inputs, stream, key, shape_key)
                self._unkeyed(tunable, key, shape_key)  # before its put: never stored
                self.tunes.put(record)
            if record.pick is None:
                return None
        tunable.launch(self, tunable.candidates[record.pick], *inputs, stream=stream)
        return record.pick

    def _built_otherwise(self, tunable: Tunable, record: TuneRecord) -> bool:
        """Whether a measured pick's kernel is recorded as a build not served here as this one's
        (`BundleLookup.measured_otherwise`): measured again, serving or warming (asked once)."""
        if self._kept.get(record.key) is record:  # (the hot path: one memo read)
            return False
        recorded = next((c.kernel_key for c in record.candidates if c.name == record.pick), "")
        try:
            here = self.kernels.key(tunable.candidates[record.pick])
        except ToolchainError:  # no compiler here, nor a build to serve: the launch says so
            return False
        lookup, warming = self.kernels.lookup, self.misses.policy is None
        if recorded != here and lookup.measured_otherwise(recorded, here, warming=warming):
            return True
        self._kept.put(record.key, record)
        return False

    def _answer(self, tunable: Tunable, *inputs: Any, stream: Stream) -> str:
        """A tunable with one candidate: that candidate, launched; nothing measured."""
        (pick,) = tunable.candidates
        tunable.launch(self, tunable.candidates[pick], *inputs, stream=stream)
        return pick

    def _register_tune(self, tunable: Tunable, key: str) -> bool:
        new = self.tune_registrations.register(active_collector(), key)  # once per collector
        n = len(tunable.candidates) if new else 0
        active_collector().count(self.device.id, "autotune", "candidates_registered", n)
        return new

    def _measure(
        self, tunable: Tunable, inputs: tuple[Any, ...], stream: Stream, key: str, shape_key: str
    ) -> TuneRecord:
        """`measure`, its registrations settled: measured, pending, failed or abandoned."""
        go = lambda kernel, args, on: tunable.launch(self, kernel, *args, stream=on)  # noqa: E731
        try:
            record = measure(self.device, self.kernels, go, tunable, inputs, stream, key, shape_key)
        except TuneFailure:
            self.tunes.failed[key] = f"{tunable.name} {shape_key}"  # a report names it
            self.tune_registrations.settle(key, "failed")
            self.tunes_cut.pop(key, None)
            raise
        except BaseException as exc:  # nothing stored; a Ctrl-C's a report names
            self.tune_registrations.settle(key, "abandoned")
            if isinstance(exc, KeyboardInterrupt):  # (not a TuneSpecError: nothing measured)
                self.tunes_cut[key] = f"{tunable.name} {shape_key}"
            raise
        self.tune_registrations.settle(key, record.status)
        self.tunes_cut.pop(key, None)
        return record

    def _unkeyed(self, tunable: Tunable, key: str, shape_key: str) -> None:
        """A tune of `tunable` keyed as this process's own (a candidate unkeyed): `never`."""
        from warmcli.runtime.built import tune_unkeyed_reason  # (on a miss: as it compiles)

        if why := tune_unkeyed_reason(tunable):
            self.tunes.never[key] = (f"{tunable.name} {shape_key}", why)

    def persist(self, bundle: Store) -> tuple[int, int]:
        """Write what this runtime built and measured into `bundle`; counts `persisted`."""
        fp = self.device.fingerprint
        n_kernels, n_tunes, tunes = persist(fp, self.kernels, self.tunes, bundle)
        self.tune_registrations.record(tunes, "persisted")
        return n_kernels, n_tunes

    def done_cold(self) -> tuple[int, int]:
        """How many kernels it compiled and tunes it measured that its bundle does not hold."""
        return len(self.kernels.missed()), len(self.tunes.unpersisted()) + len(self.tunes.never)

    def unstored(self) -> int:
        """How many kernels and tunes this runtime built or measured that no write stored."""
        return len(self.kernels.unpersisted()) + len(self.tunes.unpersisted())

    def close(self) -> None:
        """Close the device (misses are nothing from now on); unsettled work is abandoned."""
        self.misses.closed = True
        self.kernels.registrations.abandon()
        self.tune_registrations.abandon()
        self.device.close()
