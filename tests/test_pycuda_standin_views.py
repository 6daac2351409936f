"""The shape-only `GPUArray` of a GPU-less pre-build (`--pycuda --arch`) against
PyCUDA's: `.ptr` an int, `itemsize`/`mem_size`, and the shape operations PyCUDA does
without a kernel (`reshape`, `ravel`, `view`, indexing and slicing), which the stand-in
refused as "elementwise and reduction kernels"; their results as kernel arguments
through the real CLI.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import ProcessMode, ProcessModeOverride
from warmcli.backends.cuda.arch import ArchDevice
from warmcli.pycuda import ArgumentError, PyCudaError, SourceModule, bound_runtime
from warmcli.pycuda.standins import empty, to_gpu
from warmcli.runtime.runtime import Runtime


def test_gpuarray_stand_in_has_pycudas_shape_operations() -> None:
    a = to_gpu(np.zeros((4, 8), np.float32))
    assert a.ptr == 0 and isinstance(a.ptr, int) and a.ptr + 4 == 4, "PyCUDA's ptr is an int"
    assert (a.itemsize, a.mem_size, a.size, a.nbytes) == (4, 32, 32, 128)
    assert a.reshape(32).shape == (32,) and a.reshape((8, -1)).shape == (8, 4)
    assert a.reshape(2, 16).strides == (64, 4) and a.ravel().shape == (32,)
    assert a.view(np.int32).dtype == np.int32 and a.view(np.int32).shape == (4, 8)
    row = a[1]
    assert row.shape == (8,) and row.nbytes == 32 and row.strides == (4,)
    assert a[1:3].shape == (2, 8) and a[:, 2:4].shape == (4, 2)
    assert a[:, 2:4].strides == (32, 4), "a column slice keeps the parent's row stride"
    assert empty((2, 3), np.int16, order="F").strides == (2, 4)
    with pytest.raises(PyCudaError, match=r"reshape\(5, 7\): cannot reshape array of size 32"):
        a.reshape(5, 7)
    with pytest.raises(PyCudaError, match=r"GPUArray\.sum: a GPU-less stand-in"):
        a.sum()


def test_a_sliced_gpuarray_is_a_kernel_argument(warm: Warm, workload_file, tmp_path) -> None:
    """Through the real CLI: rows of a stand-in array, its `.ptr` and a reshape, as kernel
    arguments under `--pycuda --arch sm_90`; a column slice is refused, named."""
    script = workload_file("""
import numpy as np
import pycuda.autoinit
import pycuda.driver as drv
import pycuda.gpuarray as gpuarray
from pycuda.compiler import SourceModule

mod = SourceModule("__global__ void k(float *x, int n) { x[threadIdx.x] = n; }")

def main():
    a = gpuarray.zeros((4, 8), np.float32)
    f = mod.get_function("k")
    f(a[1], np.int32(8), block=(8, 1, 1), grid=(1, 1))
    f(a.reshape(32), np.int32(32), block=(32, 1, 1), grid=(1, 1))
    f.prepare([np.intp, np.int32]).prepared_call((1, 1), (1, 1, 1), a.ptr, 1)
""")
    proc = warm("run", script, "--pycuda", "--arch", "sm_90", "-b", tmp_path / "s.warm", "-q")
    assert proc.returncode == 0, proc.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = SourceModule("__global__ void k(float *x) { x[0] = 1; }").get_function("k")
        with bound_runtime(Runtime(ArchDevice("sm_90"))):
            with ProcessModeOverride(ProcessMode.COMPILE_ONLY):
                with pytest.raises(ArgumentError, match="not contiguous"):
                    f(to_gpu(np.zeros((4, 8), np.float32))[:, 2:4], block=(1, 1, 1))


def test_gpuarray_stand_in_copies_transposes_and_async_copies() -> None:
    a = to_gpu(np.zeros((2, 3), np.float64))
    b = a.copy()
    assert b.shape == (2, 3) and b.gpudata is not a.gpudata and b.strides == (24, 8)
    assert a.T.shape == (3, 2) and a.T.strides == (8, 24) and a.transpose((1, 0)).shape == (3, 2)
    a.set_async(np.ones((2, 3)))
    with pytest.raises(PyCudaError, match=r"GPUArray\.set: 5 elements into 6"):
        a.set_async(np.ones(5))
