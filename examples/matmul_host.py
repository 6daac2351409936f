"""Host example workload: a tiled matmul tuned over tile sizes, then bias+ReLU and a row sum.

Run it with `warm run examples/matmul_host.py`. Kernels are plain C, compiled by
the system C compiler; the matmul's candidates differ only in their TILE define.
"""

from __future__ import annotations

import numpy as np

from warmcli import Kernel, Runtime, Tunable

DEVICE = "host"
SHAPES = [(64, 64, 64), (96, 128, 80), (160, 160, 160)]

MATMUL_SOURCE = r"""
#define MIN(a, b) ((a) < (b) ? (a) : (b))
void matmul(const float *A, const float *B, float *C, int M, int N, int K) {
    for (int i = 0; i < M * N; i++) C[i] = 0.0f;
    for (int i0 = 0; i0 < M; i0 += TILE)
        for (int k0 = 0; k0 < K; k0 += TILE)
            for (int j0 = 0; j0 < N; j0 += TILE)
                for (int i = i0; i < MIN(i0 + TILE, M); i++)
                    for (int k = k0; k < MIN(k0 + TILE, K); k++) {
                        const float a = A[i * K + k];
                        for (int j = j0; j < MIN(j0 + TILE, N); j++)
                            C[i * N + j] += a * B[k * N + j];
                    }
}
"""

BIAS_RELU = Kernel(
    r"""
void bias_relu(float *C, const float *bias, int M, int N) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float v = C[i * N + j] + bias[j];
            C[i * N + j] = v > 0.0f ? v : 0.0f;
        }
}
""",
    "bias_relu",
    "PPii",
)

ROW_SUM = Kernel(
    r"""
void row_sum(const float *C, float *out, int M, int N) {
    for (int i = 0; i < M; i++) {
        double acc = 0.0;
        for (int j = 0; j < N; j++) acc += C[i * N + j];
        out[i] = (float)acc;
    }
}
""",
    "row_sum",
    "PPii",
)


def launch_matmul(rt: Runtime, kernel: Kernel, a, b, c, m: int, n: int, k: int, *, stream=None):
    rt.launch(kernel, a, b, c, m, n, k, stream=stream)


MATMUL = Tunable(
    name="matmul",
    candidates={
        f"tile{t}": Kernel(MATMUL_SOURCE, "matmul", "PPPiii", defines={"TILE": t}, name="matmul")
        for t in (8, 16, 32, 64)
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
        rt.launch(BIAS_RELU, c, bias, m, n)
        rt.launch(ROW_SUM, c, out, m, n)
