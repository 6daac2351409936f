"""CUDA example workload: a shared-memory tiled matmul tuned over tile size × unroll, then
bias+ReLU and a row sum.

On a GPU: `warm run examples/matmul_cuda.py`. Without one (a CI pre-build):
`warm run examples/matmul_cuda.py --arch sm_80 --arch sm_90` compiles every candidate's
cubin for both architectures and records the tunes as pending.
"""

from __future__ import annotations

import numpy as np

from warmcli import Kernel, Runtime, Tunable

DEVICE = "cuda"
SHAPES = [(256, 256, 256), (512, 384, 640), (1024, 1024, 1024)]

MATMUL_SOURCE = r"""
extern "C" __global__ void matmul(const float *A, const float *B, float *C, int M, int N, int K) {
    __shared__ float As[TILE][TILE];
    __shared__ float Bs[TILE][TILE];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int t = 0; t < K; t += TILE) {
        As[ty][tx] = (row < M && t + tx < K) ? A[row * K + t + tx] : 0.0f;
        Bs[ty][tx] = (col < N && t + ty < K) ? B[(t + ty) * N + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; k += UNROLL)  // UNROLL divides TILE
            for (int u = 0; u < UNROLL; u++) acc += As[ty][k + u] * Bs[k + u][tx];
        __syncthreads();
    }
    if (row < M && col < N) C[row * N + col] = acc;
}
"""

BIAS_RELU = Kernel(
    r"""
extern "C" __global__ void bias_relu(float *C, const float *bias, int M, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M * N) {
        const float v = C[i] + bias[i % N];
        C[i] = v > 0.0f ? v : 0.0f;
    }
}
""",
    "bias_relu",
    "PPii",
    language="cuda",
)

ROW_SUM = Kernel(
    r"""
extern "C" __global__ void row_sum(const float *C, float *out, int M, int N) {
    __shared__ float part[256];
    const int row = blockIdx.x;
    float acc = 0.0f;
    for (int j = threadIdx.x; j < N; j += blockDim.x) acc += C[row * N + j];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[row] = part[0];
}
""",
    "row_sum",
    "PPii",
    language="cuda",
)


def launch_matmul(rt: Runtime, kernel: Kernel, a, b, c, m: int, n: int, k: int, *, stream=None):
    tile = int(kernel.define("TILE") or 16)
    grid = ((n + tile - 1) // tile, (m + tile - 1) // tile)
    rt.launch(kernel, a, b, c, m, n, k, grid=grid, block=(tile, tile), stream=stream)


MATMUL = Tunable(
    name="matmul",
    candidates={
        f"tile{t}_unroll{u}": Kernel(
            MATMUL_SOURCE,
            "matmul",
            "PPPiii",
            language="cuda",
            defines={"TILE": t, "UNROLL": u},
        )
        for t in (8, 16, 32)
        for u in (1, 4)
    },
    launch=launch_matmul,
)


def workload(rt: Runtime) -> None:
    rng = np.random.default_rng(0)
    for m, n, k in SHAPES:
        a = rt.upload(rng.standard_normal((m, k), dtype=np.float32))
        b = rt.upload(rng.standard_normal((k, n), dtype=np.float32))
        bias = rt.upload(rng.standard_normal(n, dtype=np.float32))
        c = rt.buffer((m, n), "float32")
        out = rt.buffer(m, "float32")
        rt.tune(MATMUL, a, b, c, m, n, k)
        rt.launch(BIAS_RELU, c, bias, m, n, grid=(m * n + 255) // 256, block=256)
        rt.launch(ROW_SUM, c, out, m, n, grid=m, block=256)
