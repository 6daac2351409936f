"""A PyCUDA program, warmed by changing its imports, not its GPU code.

Everything below `main()` is written as a PyCUDA user writes it: `SourceModule`,
`get_function`, `block=`/`grid=`, `drv.In`/`drv.Out`, `gpuarray`, a prepared call,
a `__constant__` set through `get_global`, and a block size picked by timing (the
`autotune` decorator instead of an event loop). Only the two marked imports differ
from plain PyCUDA.

    warm run examples/pycuda_style.py --pycuda --allow-discarded-reads            # on a GPU
    warm run examples/pycuda_style.py --pycuda --arch sm_90 --allow-discarded-reads  # no GPU
    WARM_BUNDLE=bundle.warm python examples/pycuda_style.py   # production: compiles nothing

`--allow-discarded-reads`: `drv.Out` and `.get()` read results back, and under the
warming passes nothing ran, so those reads are meaningless (warm warns and leaves the
arrays as they were); `main()` never branches on them.
"""

from __future__ import annotations

import functools

import numpy as np
import pycuda.driver as drv
import pycuda.gpuarray as gpuarray

import warmcli.pycuda.autoinit  # noqa: F401  (was: import pycuda.autoinit)
from warmcli.pycuda import SourceModule, autotune  # (was: from pycuda.compiler import ...)

N = 1 << 16

mod = SourceModule("""
    __device__ float twice(float x) { return 2.0f * x; }

    __global__ void multiply_them(float *dest, const float *a, const float *b, int n)
    {
        const int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) dest[i] = a[i] * b[i];
    }

    __global__ void saxpy(float alpha, const float *x, float *y, int n)
    {
        const int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = twice(0.5f * alpha) * x[i] + y[i];
    }
""")

scaler = SourceModule("""
    __constant__ float factor[1];

    __global__ void scale(float *x, int n)
    {
        const int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] *= factor[0];
    }
""")

SUM_SOURCE = """
    __global__ void block_sum(const float *x, float *out, int n)
    {
        // grid-stride partial sums, a warp-shuffle reduction, one atomic per warp
        float acc = 0.0f;
        const int stride = gridDim.x * BLOCK;
        for (int i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += stride) acc += x[i];
        for (int lane = 16; lane > 0; lane /= 2) acc += __shfl_down_sync(0xffffffffu, acc, lane);
        if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
    }
"""


@functools.cache
def sum_module(block: int) -> SourceModule:
    return SourceModule(SUM_SOURCE, options=[f"-DBLOCK={block}"])


@autotune(configs=[{"block": b} for b in (128, 256, 512)], key=["n"])
def block_sum(x, out, n, block):
    grid = (min(1024, (n + block - 1) // block), 1)
    sum_module(block).get_function("block_sum")(x, out, np.int32(n), block=(block, 1, 1), grid=grid)


def main():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(N).astype(np.float32)
    b = rng.standard_normal(N).astype(np.float32)
    grid = ((N + 255) // 256, 1)

    dest = np.zeros_like(a)
    multiply_them = mod.get_function("multiply_them")
    multiply_them(drv.Out(dest), drv.In(a), drv.In(b), np.int32(N), block=(256, 1, 1), grid=grid)

    x, y = gpuarray.to_gpu(a), gpuarray.to_gpu(b)
    saxpy = mod.get_function("saxpy").prepare("fPPi")
    saxpy.prepared_call(grid, (256, 1, 1), 3.0, x.gpudata, y.gpudata, N)

    factor, _ = scaler.get_global("factor")
    drv.memcpy_htod(factor, np.array([0.5], dtype=np.float32))
    scaler.get_function("scale")(y, np.int32(N), block=(256, 1, 1), grid=grid)

    total = gpuarray.zeros(1, dtype=np.float32)
    block_sum(y, total, N)
    return a, b, dest, y.get(), total.get()


if __name__ == "__main__":
    a, b, dest, y, total = main()
    expected = 0.5 * (3.0 * a + b)
    assert np.allclose(dest, a * b) and np.allclose(y, expected, rtol=1e-5, atol=1e-5)
    assert np.isclose(total[0], expected.sum(), rtol=1e-3, atol=1e-2)
    print("pycuda_style: results agree with numpy")
