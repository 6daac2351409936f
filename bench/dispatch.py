"""Per-launch cost of warm's `Execute` path over a direct call (`dispatch_host`, `dispatch_cuda`).

A trivial kernel (one pointer, one int) is launched `launches` times through
`Runtime.launch` under `Execute`, already loaded, and the same loaded function is
called directly the same number of times: through ctypes with the buffer's data
pointer (read once: the tightest direct call) on the host, through PyCUDA's
`prepared_call` on a GPU (with the context made current once, as a PyCUDA user
has it). The best of several loops is taken
on both sides; the row is the overhead per launch against its 5 µs budget.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.rows import Row, Size, at_most, best_of, skipped, us
from warmcli.kernel import Kernel
from warmcli.runtime.runtime import Runtime

BUDGET = 5e-6
TARGET = "≤ 1× (5 µs per launch over the direct call)"

HOST_KERNEL = Kernel("void touch(int *p, int n) { if (n < 0) p[0] = n; }", "touch", "Pi")
CUDA_KERNEL = Kernel(
    'extern "C" __global__ void touch(int *p, int n) { if (n < 0) p[0] = n; }',
    "touch",
    "Pi",
    language="cuda",
)


def _per_launch(size: Size, call: Callable[[], object]) -> float:
    n = size.launches

    def loop() -> None:
        for _ in range(n):
            call()

    return best_of(size.repeats, loop) / n


def _row(name: str, warm: float, direct: float, how: str) -> Row:
    over = warm - direct
    detail = (
        f"warm {us(warm)} vs {how} {us(direct)} per launch: {us(over)} over "
        f"({warm / direct:.1f}× the direct call)"
    )
    return at_most(name, over / BUDGET, 1.0, detail, "5 µs per launch over the direct call")


def dispatch_host(size: Size) -> Row:
    from warmcli.backends.host import HostDevice

    rt = Runtime(HostDevice())
    try:
        buffer = rt.buffer(4, "int32")
        rt.launch(HOST_KERNEL, buffer, 1)  # compile and load, outside the timing
        function = rt.kernels.get(HOST_KERNEL)
        pointer = buffer.handle.ctypes.data
        warm = _per_launch(size, lambda: rt.launch(HOST_KERNEL, buffer, 1))
        direct = _per_launch(size, lambda: function(pointer, 1))
    finally:
        rt.close()
    return _row("dispatch_host", warm, direct, "ctypes")


def dispatch_cuda(size: Size) -> Row:
    from warmcli.backends.opening import cuda_available

    if not cuda_available():
        return skipped("dispatch_cuda", TARGET, "skipped: no GPU")
    import numpy as np

    from warmcli.backends.cuda.device import CudaDevice

    rt = Runtime(CudaDevice(0))
    try:
        buffer = rt.buffer(4, "int32")
        rt.launch(CUDA_KERNEL, buffer, 1, grid=1, block=32)
        function = rt.kernels.get(CUDA_KERNEL)
        rt.synchronize()
        warm = _per_launch(size, lambda: rt.launch(CUDA_KERNEL, buffer, 1, grid=1, block=32))
        rt.synchronize()
        pointer, one = int(buffer.handle), np.int32(1)
        with rt.device.active() as cuda:  # type: ignore[attr-defined]
            direct = _per_launch(
                size, lambda: function.prepared_call((1, 1), (32, 1, 1), pointer, one)
            )
            cuda.Context.synchronize()
    finally:
        rt.close()
    return _row("dispatch_cuda", warm, direct, "PyCUDA prepared_call")
