"""Generated host workload: many small kernels and tunes, for sharding tests and the bench.

`WARM_EXAMPLE_KERNELS` kernels (default 200): a fifth of that many tunable operations
with three candidates each, the rest launched plainly. `WARM_EXAMPLE_SPIN` (default 0)
adds that many loop iterations to every candidate, to make tuning the heavy part.
Run it with `warm run examples/many_kernels_host.py --shard 0/4`.
"""

from __future__ import annotations

import os

from warmcli import Kernel, Runtime, Tunable

DEVICE = "host"
KERNELS = int(os.environ.get("WARM_EXAMPLE_KERNELS", "200"))
SPIN = int(os.environ.get("WARM_EXAMPLE_SPIN", "0"))
TUNES = KERNELS // 5
CANDIDATES = 3

SOURCE = r"""
void step(float *x, int n) {
    volatile float spin = 0.0f;
    for (long s = 0; s < SPIN; s++) spin += (float)s;
    for (int j = 0; j < n; j++) x[j] = x[j] * 0.5f + (float)(ID + VARIANT);
}
"""


def _kernel(ident: int, variant: int) -> Kernel:
    defines = {"ID": ident, "VARIANT": variant, "SPIN": SPIN}
    return Kernel(SOURCE, "step", "Pi", defines=defines, name=f"step{ident}")


def _launch(rt: Runtime, kernel: Kernel, x, n: int, *, stream=None) -> None:
    rt.launch(kernel, x, n, stream=stream)


OPERATIONS = [
    Tunable(
        name=f"op{i}",
        candidates={f"v{v}": _kernel(i, v) for v in range(CANDIDATES)},
        launch=_launch,
        warmup=0,
        repeats=2,
    )
    for i in range(TUNES)
]
PLAIN = [_kernel(TUNES + i, 0) for i in range(KERNELS - CANDIDATES * TUNES)]


def workload(rt: Runtime) -> None:
    x = rt.buffer(64, "float32")
    for op in OPERATIONS:
        rt.tune(op, x, 64)
    for kernel in PLAIN:
        rt.launch(kernel, x, 64)
