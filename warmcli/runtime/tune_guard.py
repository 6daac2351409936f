"""What keeps a tune's measurement from changing the data: snapshots, restores, output checks.

Candidates are measured on the caller's own buffers, so a kernel that updates its output in
place would otherwise be applied warm-up + repeats times per candidate. Before measuring, a
`TuneGuard` keeps a device-side copy of every buffer the launch may write (by default every
buffer among the tune's inputs; `Tunable(restore=...)` narrows it) and puts it back after
each candidate run, so every run, and the pick that runs once afterwards, starts from the
original contents. A buffer a candidate's launch writes that is none of the inputs (one the app
keeps, one inside an object) is kept too, when first launched on by the measuring thread
(`watch`: the stream shows it each launch's arguments, and so does every other stream, a launch
function's own; another thread's launches are left alone). One warm allocated (`Buffer.owned`)
is held weakly: one the app drops (a workspace the launch function makes on every call) is put
back no more and its copy is freed, so a tune holds no call's workspace past it; a wrapper of
memory the app owns (`rt.wrap`, PyCUDA's arguments: made afresh on every call) is held, so the
memory it names is put back. Its copies go on the measured stream, which a launch on another
does not wait for: a copy made for such a launch is waited for before it goes out, a checked
run waits for that stream before it and for the device after, and a raised candidate's restore
waits for the device. With `Tunable(check=...)` it also reads each candidate's outputs
(the kept buffers, those kept beside the inputs too, but a workspace the launch function made as
it ran, after one run on the original contents: under `restore=()`, which keeps no copy, the
inputs' buffers read back before any candidate ran are put back before each checked run)
and says why they are rejected: they differ from a reference candidate's, or a user callable
refused them (`warmcli.runtime.tune_compare` compares them); and whether the accepted
outputs told candidates apart at all (`judged_nothing`: where every output it compared was
left as it was, or holds one value that is 0 or was made from buffers of one value each, as
on zeros, a candidate that launched nothing, or a wrong one making the same value, passes).
It is handed the tunable's `restore` and `check` specs, never the tunable. The guard owns its
copies for the span of one measurement and frees them in `release`; it never measures, never
picks and never prints.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from warmcli.backends.base import Buffer, Device, Stream, next_serial
from warmcli.errors import TuneSpecError, message_of
from warmcli.runtime.tune_compare import alike, compare

JUDGED_NOTHING = "its check could not tell candidates apart"  # how its note begins


def last_line(exc: BaseException) -> str:
    """An exception as one line: its type and the last line of its message."""
    lines = message_of(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__


def _buffers_in(value: Any) -> list[Buffer]:
    if isinstance(value, Buffer):
        return [value]
    if isinstance(value, tuple | list):
        return [b for v in value for b in _buffers_in(v)]
    return []


def written_buffers(
    name: str,
    restore: Sequence[int | str] | Callable[..., Iterable[Buffer]] | None,
    positions: Sequence[int],
    inputs: tuple[Any, ...],
) -> list[Buffer]:
    """The buffers a candidate of tunable `name` may write: `restore`'s choice (a callable,
    or the input `positions` it named), else every buffer input."""
    if restore is None:
        chosen = _buffers_in(inputs)
    elif callable(restore):
        given = restore(*inputs)
        if isinstance(given, Buffer) or not isinstance(given, Iterable):
            shown = type(given).__name__
            raise TuneSpecError(f"tunable {name}: restore gave {shown}, not a list of buffers")
        chosen = list(given)
    else:
        chosen = []
        for position in positions:
            if position >= len(inputs):
                raise TuneSpecError(
                    f"tunable {name}: restore names input {position} (from 0), but "
                    f"the tune was given {len(inputs)} input(s)"
                )
            found = _buffers_in(inputs[position])
            if not found:
                raise TuneSpecError(
                    f"tunable {name}: restore names input {position} (from 0), which is "
                    f"not a buffer ({type(inputs[position]).__name__} {inputs[position]!r})"
                )
            chosen += found
    for b in chosen:
        if not isinstance(b, Buffer):
            raise TuneSpecError(f"tunable {name}: restore gave {b!r}, not a buffer")
    return list({id(b): b for b in chosen}.values())


def _holding(buffer: Buffer) -> Callable[[], Buffer]:
    """A strong hold on `buffer`, called as a weak reference is."""
    return lambda: buffer


class TuneGuard:
    """Copies of the buffers one measurement may write, put back after every run."""

    def __init__(self, device: Device, stream: Stream, buffers: Sequence[Buffer]) -> None:
        self.device = device
        self.stream = stream
        self.buffers = list(buffers)
        self._copies: list[Buffer] = []  # of `buffers`
        # Kept when first launched on (none of the inputs), with its copy: held weakly where
        # warm allocated it (dropped, its memory is gone), else held.
        self._beside: list[tuple[Callable[[], Buffer | None], Buffer]] = []
        # By id: the inputs' buffers and those kept, each one's only while `kept() is buffer`
        # (no weakref callback, which a raising signal handler could cut short: a stale id).
        self._seen: dict[int, Callable[[], Buffer | None]] = {}
        self._outer: Callable[[tuple[Any, ...]], None] | None = None  # the cover `watch` replaced
        self._every: Callable[[tuple[Any, ...]], None] | None = None  # every stream's, replaced
        self._watching = False
        self.launched: set[int] = set()  # ids of the buffers launched on since `outputs` began
        try:
            for buffer in self.buffers:
                self._copies.append(self._copy(buffer))
        except BaseException:
            self.release()
            raise

    def _copy(self, buffer: Buffer) -> Buffer:
        copy = self.device.allocate(buffer.shape, buffer.dtype)
        try:
            self.device.copy(copy, buffer, self.stream)
        except BaseException:
            self.device.free(copy)
            raise
        return copy

    def watch(self, inputs: tuple[Any, ...]) -> None:
        """From now until `release`, keep each buffer that this thread (the measuring one)
        launches on, on any stream of the device, and that is none of `inputs` (whose buffers
        `restore=` chose among), before its first launch runs; another thread's are its own."""
        self._seen = {id(b): _holding(b) for b in (*_buffers_in(inputs), *self.buffers)}
        self._outer = self.stream.watch_launches(self._cover)
        self._every = Stream.watch_every(self._cover_elsewhere)
        self._watching = True

    def _cover(self, args: tuple[Any, ...]) -> None:
        """A launch on the measured stream: its buffers' copies, queued before it there."""
        outer = self._outer or self._every  # a tune inside another's candidate: it keeps too
        if outer is not None:
            outer(args)
        self._keep(args)

    def _cover_elsewhere(self, args: tuple[Any, ...]) -> None:
        """A launch on another stream (a launch function's own): nothing orders it after a
        copy queued on the measured stream, so a buffer first met is copied and the stream
        waited for before the launch goes out (once per buffer kept, not per launch)."""
        if self._every is not None:  # what this thread's launches elsewhere showed before
            self._every(args)
        if self._keep(args):
            self.stream.synchronize()

    def _keep(self, args: tuple[Any, ...]) -> bool:
        """Keep each of `args`' buffers not kept yet (a copy queued on the measured stream);
        whether any was."""
        copied = False
        for buffer in _buffers_in(args):
            if buffer.device_id != self.device.id:  # (a launch on another device's stream)
                continue
            self.launched.add(id(buffer))
            seen = self._seen.get(id(buffer))
            if seen is None or seen() is not buffer:  # (a dead one's id: another's now)
                # (the app's memory, not owned: held, put back each run)
                kept = weakref.ref(buffer) if buffer.owned else _holding(buffer)
                self._beside.append((kept, self._copy(buffer)))
                self._seen[id(buffer)] = kept
                copied = True
        return copied

    def restore(self, *, running: bool = False) -> None:
        """Put every kept buffer back as it was (queued on the measured stream). `running`: a
        candidate's run may not have finished (it raised, or was cut short), on any stream
        (its own too, which the measured stream does not wait for): the device is waited for
        first, so no kernel of it writes a buffer after it was put back."""
        if running:
            self.device.synchronize()
        for buffer, copy in zip(self.buffers, self._copies, strict=True):
            self.device.copy(buffer, copy, self.stream)
        if any(kept() is None for kept, _ in self._beside):  # dropped: its copy freed
            self.stream.synchronize()
            for _, copy in (pair for pair in self._beside if pair[0]() is None):
                self.device.free(copy)
            self._beside = [pair for pair in self._beside if pair[0]() is not None]
            self._seen = {at: kept for at, kept in self._seen.items() if kept() is not None}
        for kept, copy in self._beside:
            buffer = kept()
            if buffer is not None:
                self.device.copy(buffer, copy, self.stream)

    def outputs(
        self,
        run: Callable[[], None],
        buffers: Sequence[Buffer] | None = None,
        beside: Callable[[Buffer, int], bool] = lambda b, made: True,
    ) -> tuple[list[Buffer], list[np.ndarray]]:
        """Run once on the original contents, read `buffers` (default: the inputs' kept
        ones) and the buffers kept beside them by now that `beside` takes (given each and
        the serial from which a buffer was made during this run: `launched` holds the ids
        this run launched on), then restore; the buffers read and their contents."""
        made, self.launched = next_serial(), set()
        # The copies queued on the measured stream (the guard's first, a restore) are done
        # before a launch on another stream (the launch function's own) can read or write.
        self.stream.synchronize()
        run()
        self.device.synchronize()  # its launches on every stream, before it is read or restored
        try:
            chosen = [b for b in self._kept_beside() if beside(b, made)]
            read = [*(self.buffers if buffers is None else buffers), *chosen]
            return read, [self.device.download(b) for b in read]
        finally:
            self.restore()

    def original(self, buffer: Buffer) -> np.ndarray:
        """A kept buffer's contents as they were before any candidate ran (its copy)."""
        pairs = [*zip(self.buffers, self._copies, strict=True)]
        pairs += [(kept(), copy) for kept, copy in self._beside]
        copy = next(c for b, c in pairs if b is buffer)
        self.stream.synchronize()
        return self.device.download(copy)

    def _kept_beside(self) -> list[Buffer]:
        """The buffers kept beside the inputs that are alive, in the order first met."""
        return [b for kept, _ in self._beside if (b := kept()) is not None]

    def release(self) -> None:
        """Free the copies (after the stream has finished with them); launches are no
        longer watched by this guard (an outer tune's guard watches them again)."""
        self.stream.watch_launches(self._outer)
        if self._watching:
            Stream.watch_every(self._every)
        self._outer = self._every = None
        self._watching = False
        copies = [*self._copies, *(copy for _, copy in self._beside)]
        self._copies.clear()
        self._beside.clear()
        if not copies:
            return
        self.stream.synchronize()
        for copy in copies:
            self.device.free(copy)


class OutputCheck:
    """`Tunable(check=...)` for one measurement (`check` is a reference candidate's name
    or the user's callable): the reference's outputs, or the inputs as they were before
    any candidate ran."""

    def __init__(
        self,
        check: str | Callable[..., Any],
        tolerance: tuple[float, float],
        inputs: tuple[Any, ...],
        guard: TuneGuard,
    ) -> None:
        self.guard = guard
        # The kept buffers; with `restore=()` (outputs fully overwritten) every buffer input,
        # so that the check still compares what a candidate wrote.
        self.compared = guard.buffers or list({id(b): b for b in _buffers_in(inputs)}.values())
        self.tolerance = tolerance
        self.reference = check if isinstance(check, str) else None
        self.user = None if isinstance(check, str) else check
        self.expected: dict[int, np.ndarray] | None = None  # by buffer id: the reference's
        self.made = 0  # the serial from which buffers were made during the reference's run
        self.inputs: tuple[Any, ...] = ()
        self.told: bool | None = None  # whether an accepted run's outputs told anything apart
        self.before: dict[int, np.ndarray] = {}  # under `restore=()` (no copy kept): as it was
        guard.stream.synchronize()
        if self.user is not None:
            self.inputs = tuple(_read_back(v, guard.device) for v in inputs)
        if not guard.buffers:
            self.before = {id(b): guard.device.download(b) for b in self.compared}

    def verdict(self, name: str, run: Callable[[], None]) -> str | None:
        """Run the candidate once on the original contents; None if its outputs pass: the
        compared inputs' buffers, then those kept beside them (none of the inputs), in the
        order first met: each this run launched on but one made while it ran (the launch
        function's workspace), and each the reference's run launched on that was made before
        it (the app's, which this candidate left as it was)."""
        reference = name == self.reference
        if self.before:  # `restore=()`: no copy kept, so what was read before tuning goes back
            self.guard.stream.synchronize()  # (another candidate's runs are done with them)
            for b in self.compared:
                self.guard.device.upload(b, self.before[id(b)])

        def beside(b: Buffer, made: int) -> bool:
            launched = self.guard.launched  # this run's (`outputs` begins it anew)
            if reference:  # every one: a workspace the app keeps may be made in its run
                self.made = made
                return id(b) in launched
            expected = self.expected or {}
            if id(b) in launched:
                return id(b) in expected or b.serial < made
            return self.user is None and id(b) in expected and b.serial < self.made

        read, outputs = self.guard.outputs(run, self.compared, beside)
        if self.user is not None:  # its own copy of the inputs: a check may edit them
            problem = judge(self.user, outputs, _fresh(self.inputs))
            if problem is None and not self.told:
                self.told = self._tells_apart(read, outputs)
            return problem
        if reference:
            self.expected = {id(b): out for b, out in zip(read, outputs, strict=True)}
            self.told = self._tells_apart(read, outputs)
            return None
        if self.expected is None:
            return f"check: the reference candidate {self.reference!r} failed: nothing to compare"
        # A buffer the reference never launched on is expected as it was before any run.
        wanted = [
            self.expected[id(b)] if id(b) in self.expected else self.guard.original(b) for b in read
        ]
        return compare(outputs, wanted, str(self.reference), self.tolerance)

    def _tells_apart(self, read: Sequence[Buffer], outputs: Sequence[np.ndarray]) -> bool | None:
        """Whether accepted outputs tell a candidate from one that launched nothing or, where
        what went in told nothing (zeros in), from a wrong one that makes the same one value
        (each would pass the check within its tolerance where no output tells it): an output
        changed tells, but one holding one value throughout that is 0, or made from buffers
        that each held one value before the run; None where there is no element. (One value
        from varied data, or from none, a fill, tells: a wrong candidate makes another.)"""
        if not any(out.size for out in outputs):
            return None
        was: dict[int, np.ndarray] = {}

        def before(buffer: Buffer) -> np.ndarray:  # read once, only when asked
            if id(buffer) not in was:
                kept = self.before.get(id(buffer))
                was[id(buffer)] = self.guard.original(buffer) if kept is None else kept
            return was[id(buffer)]

        for buffer, out in zip(read, outputs, strict=True):
            then = before(buffer)
            if then.shape == out.shape and alike(out, then, self.tolerance):
                continue  # left as it was: a candidate that launched nothing would pass
            if out.size < 2 or not alike(out, out.flat[0], self.tolerance):
                return True
            others = [before(b) for b in read if b is not buffer]  # what went in
            zero = out.dtype.kind in "biufc" and alike(out, 0, self.tolerance)  # (numbers)
            if zero or (others and all(o.size < 2 or alike(o, o.flat[0], (0, 0)) for o in others)):
                continue  # one value throughout, from zeros in (or 0): a wrong one makes it too
            return True
        return False

    def judged_nothing(self) -> str | None:
        """The warning for a check no accepted run's outputs told candidates apart by
        (`_tells_apart`), naming what to do; None where one did, or none was accepted."""
        if self.told is not False:
            return None
        return (
            f"{JUDGED_NOTHING}: every output it compared was left as it was or holds one "
            "value throughout (as on zeros), so a wrong candidate passes and may be the pick; "
            "warm it on inputs that tell them apart (random data)"
        )


def _read_back(value: Any, device: Device) -> Any:
    """An input with every buffer in it read back to the host (what a check callable gets)."""
    if isinstance(value, Buffer):
        return device.download(value)
    if isinstance(value, tuple | list):
        return type(value)(_read_back(v, device) for v in value)
    return value


def _fresh(value: Any) -> Any:
    """A copy of the read-back inputs' arrays (in their tuples and lists), for one check."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, tuple | list):
        return type(value)(_fresh(v) for v in value)
    return value


def judge(
    check: Callable[..., Any], outputs: list[np.ndarray], inputs: tuple[Any, ...]
) -> str | None:
    """A user check's verdict on one candidate's outputs: None to accept, else the reason.
    It accepts with None or True and rejects with False (numpy's bools alike) or by raising;
    any other answer (an array, a generator, a coroutine) is no verdict: rejected."""
    try:
        verdict = check(outputs, inputs)
    except Exception as exc:  # the user's check said why: its summary, the first lines
        lines = [line.strip() for line in message_of(exc).splitlines() if line.strip()][:2]
        return f"check: {type(exc).__name__}: {'; '.join(lines)}".rstrip(": ")
    if verdict is None or verdict is True or verdict is np.True_:
        return None
    if verdict is False or verdict is np.False_:  # `(a == b).all()` answers numpy's
        return "check: the check callable rejected its outputs"
    if inspect.iscoroutine(verdict):  # never awaited: close it, no warning at exit
        verdict.close()
    return f"check: the check callable returned {type(verdict).__name__}, not True, False or None"
