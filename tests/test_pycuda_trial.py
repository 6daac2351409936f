"""A PyCUDA user's trial of warm's `SourceModule` and `Function` against PyCUDA's own: a
timed launch's return, the `Function` attributes warm does not serve, `get_function` of
a name that is no kernel, `arch=`/`code=` naming the device's architecture. The real
`warmcli.pycuda` on a compile-only sm_90 device (real NVRTC where a launch compiles).
"""

from __future__ import annotations

import numpy as np
import pytest

from warmcli import DiscardedReadWarning, ProcessMode, ProcessModeOverride
from warmcli.backends.cuda.arch import ArchDevice
from warmcli.pycuda import PyCudaError, SourceModule, bound_runtime
from warmcli.pycuda.standins import GPUArray
from warmcli.runtime.runtime import Runtime

SOURCE = "__global__ void k(float *x, int n, float a) { if (threadIdx.x < n) x[0] = a; }"


def test_a_timed_launch_under_a_discarding_pass_returns_a_float() -> None:
    """PyCUDA's `f(..., time_kernel=True)` returns seconds as a float; an allowed
    discarded read gave None (and `prepared_timed_call()` gave 0.0)."""
    f = SourceModule(SOURCE).get_function("k")
    rt = Runtime(ArchDevice("sm_90"))
    rt.allow_discarded_reads = True
    x = GPUArray(1, np.float32)
    with bound_runtime(rt), ProcessModeOverride(ProcessMode.COMPILE_ONLY):
        with pytest.warns(DiscardedReadWarning):
            seconds = f(x, np.int32(1), np.float32(1), block=(1, 1, 1), time_kernel=True)
    assert seconds == 0.0 and isinstance(seconds, float)


@pytest.mark.parametrize(
    "name", ["num_regs", "shared_size_bytes", "max_threads_per_block", "local_size_bytes"]
)
def test_function_attributes_warm_does_not_serve_are_named(name: str) -> None:
    f = SourceModule(SOURCE).get_function("k")
    with pytest.raises(PyCudaError, match=rf"k\.{name}: warm does not serve"):
        getattr(f, name)


@pytest.mark.parametrize(
    ("call", "args"),
    [("set_cache_config", (0,)), ("set_attribute", (0, 0)), ("get_attribute", (0,))],
)
def test_function_settings_warm_does_not_serve_are_named(call: str, args: tuple) -> None:
    f = SourceModule(SOURCE).get_function("k")
    with pytest.raises(PyCudaError, match=rf"k\.{call}: warm does not serve"):
        getattr(f, call)(*args)


def test_get_function_of_a_device_function_is_refused_there() -> None:
    """PyCUDA's `get_function` of a `__device__` function fails there (named symbol not
    found); warm took it and its launch failed the compile on parameter letters."""
    mod = SourceModule("__device__ float h(float v) { return v; }\n" + SOURCE)
    with pytest.raises(PyCudaError, match=r"get_function\('h'\): h is not a __global__"):
        mod.get_function("h")
    assert mod.get_function("k").name == "k"


def test_arch_compute_and_code_naming_the_device_are_taken() -> None:
    """`arch="compute_90", code="sm_90"` makes PyCUDA's nvcc build an sm_90 cubin."""
    f = SourceModule(SOURCE, arch="compute_90", code="sm_90").get_function("k")
    with bound_runtime(Runtime(ArchDevice("sm_90"))), ProcessModeOverride(ProcessMode.COMPILE_ONLY):
        f(GPUArray(1, np.float32), np.int32(1), np.float32(1), block=(1, 1, 1))
        for arch, code in (("compute_80", "sm_90"), ("compute_90", "compute_90")):
            other = SourceModule(SOURCE, arch=arch, code=code).get_function("k")
            with pytest.raises(PyCudaError, match="warm builds cubins for the device"):
                other(GPUArray(1, np.float32), np.int32(1), np.float32(1), block=(1, 1, 1))


def test_a_kernel_named_by_token_pasting_is_got_and_compiled() -> None:
    """PyCUDA finds `k_1` of `K(1)` with `#define K(n) __global__ void k_##n(...)` in its
    cubin; warm refused it ("no such kernel") as the name is not in the source text."""
    mod = SourceModule("#define K(n) __global__ void k_##n(float *x) { x[0] = n; }\nK(1)\nK(2)")
    rt = Runtime(ArchDevice("sm_90"), jobs=1)
    with bound_runtime(rt):
        for mode in (ProcessMode.COMPILE_ONLY, ProcessMode.COMPILE_AND_AUTOTUNE):
            with ProcessModeOverride(mode) as collector:
                for name in ("k_1", "k_2"):
                    mod.get_function(name)(GPUArray(1, np.float32), block=(1, 1, 1))
    c = collector.reader().compilation
    assert (c.compiled, c.failed) == (2, 0)
