"""review60b: a hostile review of pass60 and stats60's merges. Each test is a case those commits
did not think of, and failed before its fix.

Real parts: the real C compiler, production processes in a fresh Python.
"""

from __future__ import annotations

from conftest import Warm

# A production process with no bundle tunes two candidates whose launch function launches a
# helper kernel first (a second stage, a clearing pass): the helper compiles at its first launch,
# inside the tune, by the runtime's launch, not by the tune's own obtaining of its candidates.
HELPER_IN_THE_LAUNCH = """
import json, time, numpy as np, warmcli
from warmcli import Kernel, Tunable, StatisticsReader
from warmcli.execution import default_collector
SRC = "void th(float *x, int n) { for (int i = 0; i < n; i++) x[i] = x[i] * F; }"
CANDIDATES = {f"f{i}": Kernel(SRC, "th", "Pi", defines={"F": i}) for i in (1, 2)}
HELPER = Kernel("void zh(float *x, int n) { for (int i = 0; i < n; i++) x[i] = 0; }", "zh", "Pi")
def launch(rt, k, y, n, stream=None):
    rt.launch(HELPER, y, n, stream=stream)
    rt.launch(k, y, n, stream=stream)
T = Tunable(name="th", candidates=CANDIDATES, launch=launch, restore=[0])
rt = warmcli.runtime("host")
y = rt.upload(np.zeros(32, dtype=np.float32))
for k in CANDIDATES.values():
    rt.launch(k, y, 32)  # the candidates compiled before the tune: only the helper is left
rt.synchronize()
read = StatisticsReader(default_collector())
compiled_before = read.compilation.seconds
begun = time.perf_counter()
rt.tune(T, y, 32)
wall = time.perf_counter() - begun
read = StatisticsReader(default_collector())
print(json.dumps({"wall": wall, "compile": read.compilation.seconds - compiled_before,
                  "tune": read.autotune.seconds, "compiled": read.compilation.compiled,
                  "measured": read.autotune.measured}))
"""


def test_a_kernel_the_candidates_launch_compiles_counted_once(warm: Warm) -> None:
    """Before: the tune's seconds left out only what its own `get` of each candidate took, so a
    kernel its launch function launched (compiled at its first launch inside the measuring, by
    the runtime's launch) was counted twice, as compilation and as measurement (compile + tune
    > the tune's wall). Now whatever this thread spent obtaining kernels inside the measuring
    is left out: the two are disjoint parts of the tune (an invariant, not a speed target)."""
    doc = warm.production(HELPER_IN_THE_LAUNCH)
    assert (doc["compiled"], doc["measured"]) == (3, 1), doc
    assert doc["compile"] > 0 and doc["tune"] > 0, doc
    assert doc["compile"] + doc["tune"] <= doc["wall"], doc
