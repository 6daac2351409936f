"""What a tune's measuring time counts: its candidates' timed runs, not kernels' compiles or loads.

`measure` compiles the queue before it starts its clock, but in an executing process (production,
a verify replay) nothing is queued: each candidate is compiled, or loaded from the bundle, at its
first `get`, inside the measuring, and so is any kernel its launch function launches (a helper, a
second stage) at its first launch, or a callable check's. `clocked` times the kernel cache's
obtaining past its hit path (`KernelCache.get`'s: a compile, a load) into the calling thread's sum
(the outermost call only: a `get` inside a `get` is one), which `spent` reads, for `measure` to
leave out of `AutotuneStatistics.seconds` what its thread spent there while it measured: that
compile is `CompilationStatistics.seconds`' already, and the two are disjoint parts of a tune's
time (a tune measured in another thread at once adds nothing to this one's). `timed_samples` runs
one candidate: warm-up, then the timed runs. It owns no state but each thread's sum, and never
compiles, stores or prints itself.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

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


_Method = TypeVar("_Method", bound=Callable[..., Any])
_thread = threading.local()  # .inside: a clocked call is running; .spent: the seconds summed


def clocked(method: _Method) -> _Method:
    """`method` with its time added to the calling thread's sum (`spent`), unless it runs
    inside another clocked call (counted there)."""

    @functools.wraps(method)
    def timed(*args: Any, **kwargs: Any) -> Any:
        if getattr(_thread, "inside", False):
            return method(*args, **kwargs)
        _thread.inside = True
        begun = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            _thread.inside = False
            _thread.spent = getattr(_thread, "spent", 0.0) + time.perf_counter() - begun

    return timed  # type: ignore[return-value]


def spent() -> float:
    """The seconds this thread has spent in clocked calls (a sum: read it before and after)."""
    return getattr(_thread, "spent", 0.0)  # type: ignore[no-any-return]


def timed_samples(
    guard: TuneGuard, warmup: int, repeats: int, run: Callable[[], None]
) -> tuple[float, ...]:
    """Warm up, then time `repeats` runs; the buffers are put back after each run, untimed."""
    for _ in range(warmup):
        run()
        guard.restore()
    guard.stream.synchronize()
    samples = []
    for _ in range(max(1, repeats)):
        samples.append(guard.device.time(guard.stream, run))
        guard.restore()
    return tuple(samples)
