"""What a tune's measuring time counts: its candidates' timed runs, not their compiles or loads.

`measure` compiles the queue before it starts its clock, but in an executing process (production,
a verify replay) nothing is queued: each candidate is compiled, or loaded from the bundle, at its
first `get`, inside the measuring. `Obtaining` wraps the tune's `CandidateKernels` (what a tune
needs of its device's kernel cache) and adds up what its `get` calls took (`spent`), for `measure`
to leave out of `AutotuneStatistics.seconds`: that compile is `CompilationStatistics.seconds`'
already, and the two are disjoint parts of a tune's time. `timed_samples` runs one candidate:
warm-up, then the timed runs. It owns no state but one wrapper's sum, and never compiles, stores or
prints itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable
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


class Obtaining:
    """A tune's `CandidateKernels`, its `get` calls timed: `spent` is their sum, in seconds."""

    def __init__(self, kernels: CandidateKernels) -> None:
        self.kernels, self.spent = kernels, 0.0

    def key(self, kernel: Kernel) -> str:
        return self.kernels.key(kernel)

    def get(self, kernel: Kernel) -> Any:
        begun = time.perf_counter()
        try:
            return self.kernels.get(kernel)
        finally:
            self.spent += time.perf_counter() - begun

    def flush(self) -> None:
        self.kernels.flush()


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
