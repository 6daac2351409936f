"""CUDA example workload: saxpy and a sum reduction, each tuned over its block size.

On a GPU: `warm run examples/saxpy_cuda.py`; without one:
`warm run examples/saxpy_cuda.py --arch sm_90`.
"""

from __future__ import annotations

import numpy as np

from warmcli import Kernel, Runtime, Tunable

DEVICE = "cuda"
SIZES = [1 << 16, 1 << 20, 3_000_000]
BLOCKS = (128, 256, 512, 1024)

SAXPY_SOURCE = r"""
extern "C" __global__ void __launch_bounds__(BLOCK)
saxpy(float a, const float *x, float *y, int n) {
    const int i = blockIdx.x * BLOCK + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
"""

SUM_SOURCE = r"""
extern "C" __global__ void __launch_bounds__(BLOCK)
block_sum(const float *x, float *out, int n) {
    __shared__ float part[BLOCK];
    float acc = 0.0f;
    for (int i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += gridDim.x * BLOCK) acc += x[i];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = BLOCK / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, part[0]);
}
"""


def _block(kernel: Kernel) -> int:
    return int(kernel.define("BLOCK") or 256)


def launch_saxpy(rt: Runtime, kernel: Kernel, a: float, x, y, n: int, *, stream=None) -> None:
    block = _block(kernel)
    rt.launch(kernel, a, x, y, n, grid=(n + block - 1) // block, block=block, stream=stream)


def launch_sum(rt: Runtime, kernel: Kernel, x, out, n: int, *, stream=None) -> None:
    block = _block(kernel)
    grid = min(1024, (n + block - 1) // block)
    rt.launch(kernel, x, out, n, grid=grid, block=block, stream=stream)


def variants(source: str, entry: str, params: str) -> dict[str, Kernel]:
    return {
        f"block{b}": Kernel(source, entry, params, language="cuda", defines={"BLOCK": b})
        for b in BLOCKS
    }


SAXPY = Tunable("saxpy", variants(SAXPY_SOURCE, "saxpy", "fPPi"), launch_saxpy)
SUM = Tunable("block_sum", variants(SUM_SOURCE, "block_sum", "PPi"), launch_sum)


def workload(rt: Runtime) -> None:
    rng = np.random.default_rng(0)
    for n in SIZES:
        x = rt.upload(rng.standard_normal(n, dtype=np.float32))
        y = rt.upload(rng.standard_normal(n, dtype=np.float32))
        total = rt.buffer(1, "float32")
        rt.tune(SAXPY, 2.0, x, y, n)
        rt.tune(SUM, y, total, n)
