"""What a tune's measuring time counts: its candidates' timed runs, not kernels' compiles or loads.

`measure` compiles the queue before it starts its clock, but in an executing process (production,
a verify replay) nothing is queued: each candidate is compiled, or loaded from the bundle, at its
first `get`, inside the measuring, and so is any kernel its launch function launches (a helper, a
second stage) at its first launch, or a callable check's. While `measuring_now` (a set of the
tunes measuring, in any thread: while it is empty the kernel cache clocks nothing, so serving pays
a test only), `KernelCache.get` past its hit path (a compile, a load) is clocked by `enter` and
`leave` into the calling thread's sum (the outermost call only: a `get` inside a `get` is one),
and `measure` leaves out of `AutotuneStatistics.seconds` what its own thread spent there while it
measured: that compile is `CompilationStatistics.seconds`' already, and the two are disjoint parts
of a tune's time (a tune measured in another thread at once adds nothing to this one's).
`timed_samples` runs one candidate: warm-up, then the timed runs. It owns that set and each
thread's sum, and never compiles, stores or prints itself.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # structural types, for annotations only: no Protocol made at import
    from warmcli.kernel import Kernel
    from warmcli.runtime.tune_guard import TuneGuard

    class CandidateKernels(Protocol):
        """What a tune needs of its device's kernel cache (`KernelCache` is one)."""

        def key(self, kernel: Kernel) -> str:
            """The kernel's key on the device."""

        def get(self, kernel: Kernel) -> Any:
            """The loaded kernel, compiled first if it must be (`KernelCompileError` if not)."""

        def flush(self) -> None:
            """Compile the whole queue."""


_thread = threading.local()  # .inside: a clocked call is running; .spent: the seconds summed
# The tunes measuring now, in any thread, one token each: while none is, nothing is clocked.
measuring: set[object] = set()


@contextlib.contextmanager
def measuring_now() -> Iterator[Callable[[], float]]:
    """Within it, `KernelCache.get` past its hit path is clocked (`enter`, `leave`); it gives
    the seconds this thread has spent there since it began. Its token is added inside the
    `try` (a set's add and discard are atomic: no lock), so no Ctrl-C leaves it counted. No
    tune measures inside a `get`, so none is clocked now: a Ctrl-C that cut one short before it
    could `leave` clocks this thread's again."""
    before, token = getattr(_thread, "spent", 0.0), object()
    _thread.inside = False
    try:
        measuring.add(token)
        yield lambda: getattr(_thread, "spent", 0.0) - before
    finally:
        measuring.discard(token)


def enter() -> float | None:
    """A clocked call begins (only while a tune measures: `measuring`): its start, or None
    inside another (counted there)."""
    if getattr(_thread, "inside", False):
        return None
    _thread.inside = True
    return time.perf_counter()


def leave(begun: float) -> None:
    """The clocked call `enter` began at `begun` ends: its time added to this thread's sum."""
    _thread.inside = False
    _thread.spent = getattr(_thread, "spent", 0.0) + time.perf_counter() - begun


def timed_samples(
    guard: TuneGuard, warmup: int, repeats: int, run: Callable[[], None]
) -> tuple[float, ...]:
    """Warm up, then time `repeats` runs; the buffers are put back after each run, untimed.
    A warm-up runs as a timed run does (its time dropped): so a GPU has finished what it
    enqueued on any stream (a launch function's own) before the restore's copies, on the
    measured stream, put its buffers back."""
    for _ in range(warmup):
        guard.device.time(guard.stream, run)
        guard.restore()
    guard.stream.synchronize()
    samples = []
    for _ in range(max(1, repeats)):
        samples.append(guard.device.time(guard.stream, run))
        guard.restore()
    return tuple(samples)
