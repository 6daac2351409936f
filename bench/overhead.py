"""The whole `warm run` against the work it has to do (row `pass_overhead`).

The real CLI (`warm run examples/matmul_host.py --json`) runs in a fresh process
with a fresh `WARM_HOME` and no bundle: CLI start-up, the `CompileOnly` and
`CompileAndAutotune` passes, the bundle's write and the verify pass, all timed
from the outside. That wall time is held against what its own statistics say the
passes spent compiling (`compilation.seconds`) and measuring (`autotune.seconds`):
what is left is warm's own cost. The median of a few fresh runs is taken.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from bench.rows import Row, Size, at_most, median, ms, python
from bench.start import WORKLOAD, env_for

TARGET = 1.3


def one_run(tmp: Path, i: int) -> tuple[float, float, float, int, int]:
    """(wall, compile seconds, measurement seconds, kernels compiled, tunes measured)."""
    env = env_for(tmp / f"home{i}")
    bundle = tmp / f"run{i}.warm"
    out, wall = python(
        "-m", "warmcli", "run", str(WORKLOAD), "--bundle", str(bundle), "--json", env=env
    )
    passes = json.loads(out)["passes"]
    compile_s = sum(p["compilation"]["seconds"] for p in passes)
    tune_s = sum(p["autotune"]["seconds"] for p in passes)
    compiled = sum(p["compilation"]["compiled"] for p in passes)
    measured = sum(p["autotune"]["measured"] for p in passes)
    return wall, compile_s, tune_s, compiled, measured


def pass_overhead(size: Size) -> Row:
    with tempfile.TemporaryDirectory(prefix="warm-bench-overhead-") as tmp:
        runs = [one_run(Path(tmp), i) for i in range(max(1, min(size.repeats, 3)))]
    ratio = median([wall / max(c + t, 1e-9) for wall, c, t, _, _ in runs])
    wall, compile_s, tune_s, compiled, measured = runs[0]
    detail = (
        f"`warm run {WORKLOAD.name}` as a whole process (CLI start, both passes, bundle "
        f"write, verify), median ratio of {len(runs)} fresh runs; the first: wall {ms(wall)} "
        f"against compile {ms(compile_s)} ({compiled} kernels) + measurement {ms(tune_s)} "
        f"({measured} tunes)"
    )
    return at_most("pass_overhead", ratio, TARGET, detail)
