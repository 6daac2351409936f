"""Small user-visible faults found on stop 36, each through the real CLI in a subprocess
(real cc, real SQLite bundles; `--arch sm_90` PyCUDA scripts with real NVRTC):
`warm stats`'s sample of a large bundle's tunes, `warm diff` of a corrupt entry,
`warm run -v -q`, `WARM_STRICT`'s error, `warm run --json`'s `format` of a new bundle,
and PyCUDA scripts' 0-d array arguments and `pycuda.compiler`/`pycuda.tools` names.
"""

from __future__ import annotations

import re
from pathlib import Path

from conftest import Warm

MANY_OPS = r"""
from warmcli import Kernel, Tunable

SOURCE = "void step(float *x, int n) { for (int j = 0; j < n; j++) x[j] = x[j] * 0.5f + V; }"
K = {v: Kernel(SOURCE, "step", "Pi", defines={"V": v}, name="step") for v in (1, 2)}


def _launch(rt, kernel, x, n, *, stream=None):
    rt.launch(kernel, x, n, stream=stream)


def _op(name):
    return Tunable(name=name, candidates={f"v{v}": k for v, k in K.items()}, launch=_launch,
                   warmup=0, repeats=1)


OPS = [_op(f"op{i}") for i in range(201)]
WIDE = _op("wide")


def workload(rt):
    x = rt.buffer(128, "float32")
    for op in OPS:
        rt.tune(op, x, 8)
    for n in range(1, 106):
        rt.tune(WIDE, x, n)
"""


def test_stats_samples_a_large_bundles_tunes_with_numbers_sorted_as_numbers(
    warm: Warm, tmp_path: Path
) -> None:
    """The 20 tunes `warm stats` shows of a large bundle were picked in text order
    (op0, op1, op10, op100...) and `--explain`'s first 100 by shape in text order (shape
    `100` before `99`), though numbers sort as numbers everywhere else."""
    script, bundle = tmp_path / "many.py", tmp_path / "many.warm"
    script.write_text(MANY_OPS)
    assert warm("run", script, "-b", bundle, "--quiet").returncode == 0
    proc = warm("stats", bundle)
    assert proc.returncode == 0, proc.stderr
    sample = proc.stdout.split("20 of 306 tunes")[1]
    shown = re.findall(r"^ (op\d+) ", sample, re.M)
    assert shown == [f"op{i}" for i in range(20)], shown
    proc = warm("stats", bundle, "--explain", "wide")
    assert proc.returncode == 0, proc.stderr
    shapes = re.findall(r"^wide float32\[128\] (\d+) ", proc.stdout, re.M)
    assert shapes == [str(n) for n in range(1, 101)], shapes
