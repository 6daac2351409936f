"""Launch arguments PyCUDA packs with `struct.pack` under its letters: a float for an
integer parameter is refused there, and was truncated by warm (3.7 became 3); an
address passed as an int for a pointer is packed as it is, and was refused by warm's
launch ("must be a buffer"). The real `warmcli.pycuda` on a compile-only sm_90 device.
"""

from __future__ import annotations

import numpy as np
import pytest

from warmcli import ProcessMode, ProcessModeOverride
from warmcli.backends.cuda.arch import ArchDevice
from warmcli.pycuda import ArgumentError, SourceModule, bound_runtime
from warmcli.pycuda.standins import GPUArray
from warmcli.runtime.runtime import Runtime

SOURCE = "__global__ void k(float *x, int n, float a) { if (threadIdx.x < n) x[0] = a; }"


@pytest.mark.parametrize("n", [3.7, 3.0, np.float32(3), np.float64(3.5)])
def test_a_float_for_an_integer_parameter_is_refused_not_truncated(n: object) -> None:
    """PyCUDA packs a prepared `i` with `struct.pack`, which refuses a float; warm made
    3.7 into 3 and launched."""
    f = SourceModule(SOURCE).get_function("k").prepare("Pif")
    with bound_runtime(Runtime(ArchDevice("sm_90"))), ProcessModeOverride(ProcessMode.COMPILE_ONLY):
        with pytest.raises(ArgumentError, match=r"argument 2: .* is no 'i' value"):
            f.prepared_call((1, 1), (32, 1, 1), GPUArray(1, np.float32).gpudata, n, 1.5)
        f.prepared_call((1, 1), (32, 1, 1), GPUArray(1, np.float32).gpudata, np.int64(3), 2)


def test_an_address_as_an_int_is_a_pointer_argument() -> None:
    """`prepared_call(..., int(alloc))`, as PyCUDA packs a `P`: taken, not refused."""
    f = SourceModule(SOURCE).get_function("k").prepare("Pif")
    with bound_runtime(Runtime(ArchDevice("sm_90"))), ProcessModeOverride(ProcessMode.COMPILE_ONLY):
        f.prepared_call((1, 1), (32, 1, 1), 0, 3, 1.5)
        f.prepared_call((1, 1), (32, 1, 1), np.uint64(0), 3, 1.5)
