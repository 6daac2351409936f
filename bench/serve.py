"""The cost of serving one kernel from the bundle, hot, in process (row `serve_per_kernel`).

One bundle is warmed by the real CLI (`warm run`) from the largest generated
workload (`bench.generated`); the smaller ones launch a prefix of the same kernels,
so the bundle serves them all. Each size is started in fresh processes
(`bench/first_result.py`): the workload's first run (serve every kernel, launch
each once) less its second run (the same launches, everything loaded), divided by
the kernels served, is the cost of serving one. The bundle's opening (and the
runtime's making) comes before the first run and is timed apart, in the detail: it
is once per process, not per kernel. What the first launches do once per process
(the toolchain's identity read, a statement prepared, a blob read and loaded once
for the kernels it holds) is in the kernels' cost; the detail says how much, from
the cost of one more kernel between the smallest and largest size. Medians of a
few processes per size; the row is the worst size against 20 µs, and its detail
says how flat the cost is across sizes.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench import generated
from bench.rows import Row, Size, at_most, median, ms, us
from bench.start import env_for, start, warm_run

BUDGET = 20e-6
PROCESSES = 3


def serve_per_kernel(size: Size) -> list[Row]:
    per_kernel: dict[int, float] = {}
    opening: list[float] = []
    with tempfile.TemporaryDirectory(prefix="warm-bench-serve-") as tmp_name:
        tmp = Path(tmp_name)
        env = env_for(tmp / "home")
        bundle = tmp / "served.warm"
        biggest = max(size.serve)
        warm_run(env, generated.write(tmp / f"gen{biggest}.py", biggest), bundle)
        for n in size.serve:
            workload = generated.write(tmp / f"gen{n}.py", n)
            runs = [start(env, workload, bundle) for _ in range(PROCESSES)]
            if any(r["compiled"] or r["loaded"] != n for r in runs):
                raise RuntimeError(f"{n} kernels: not all served from the bundle: {runs}")
            per_kernel[n] = median([(r["first"] - r["opened"] - r["again"]) / n for r in runs])
            opening += [r["opened"] for r in runs]
    worst = max(per_kernel.values())
    sizes = ", ".join(f"{n}: {us(s)}" for n, s in per_kernel.items())
    small, large = min(per_kernel), max(per_kernel)
    low, high = per_kernel[small], per_kernel[large]
    # One more kernel's cost, between the sizes; the rest of the smallest size's is what its
    # first launches pay once per process (the toolchain's identity, a statement prepared,
    # a signature's converter generated, a blob loaded), whatever the kernels.
    marginal = (high * large - low * small) / (large - small) if large > small else high
    detail = (
        f"per kernel served (first run less second run, over kernels; median of {PROCESSES} "
        f"fresh processes): {sizes}; largest/smallest {high / low:.2f} (1 = flat); one "
        f"more kernel {us(marginal)}, once per process in the first run "
        f"{ms((low - marginal) * small)}; the bundle's opening and the runtime's making, "
        f"before the first run and not counted above: median {ms(median(opening))}"
    )
    return [at_most("serve_per_kernel", worst / BUDGET, 1.0, detail, "of 20 µs per kernel")]
