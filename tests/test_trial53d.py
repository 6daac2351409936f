"""A workload author's trial (stop 53): a workload warmed, then developed further, production
running the new code on the old bundle. Each change, one at a time, after `warm run`: a tune's
candidates added, removed, reordered, one's define changed (the same names, other values), two
candidates' names swapped; its key inputs (a shape, a scalar); a kernel's source; the launch
function of a tunable without a check. Production must compute a cold start's bits, say what it
missed, and `warm run` into the old bundle re-warm only that. Real cc, real SQLite bundles, the
real CLI (forked).
What held: every change to candidates, kernels and key inputs is a miss naming its part
(`checksum: bundle has u1, u4, this process wants u1, u4, u8`; `the kernel of candidate 'u1'
... is not the bundle's`; `shape: ... 2.0 15`), a reorder a hit, and the results a cold start's.
What it found:
- a launch function edited after warming to refuse the pick the bundle holds (a guard for a
  candidate it no longer runs, `assert kernel.define("U") != "4"`) is not keyed without a check,
  so production was served that pick and died of the guard (a traceback), where a cold start
  excludes the candidate and computes; `warm run` into the old bundle failed (`workload raised
  during CompileOnly: AssertionError`) and `warm verify` too, so no re-warm could mend it. Such a
  pick is stale now: measured again (`warmcli.runtime.tune_served`), a `launch` miss saying what
  the launch function raised, and the re-warm stores the new pick under the same key.
"""

from __future__ import annotations

import json
from pathlib import Path

from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# Two candidates that compute the same bits (a loop unrolled by U), on random data; u1 spins
# first (some hundred µs, u4 some µs: u4 is the pick).
V1 = """
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = '''void ax(float *y, const float *x, float a, int n) {
  for (volatile int s = 0; s < (U == 1) * 200000; s++) {}
  for (int i0 = 0; i0 < n; i0 += U) for (int i = i0; i < i0 + U && i < n; i++) y[i] = a * x[i];
}'''
REFUSED = None  # the edit: a guard for a candidate this launch function no longer runs

def go(rt, kernel, y, x, a, n, *, stream=None):
    assert kernel.define("U") != REFUSED, f"no U={REFUSED}"
    rt.launch(kernel, y, x, a, n, stream=stream)

AX = Tunable("ax", {f"u{u}": Kernel(SRC, "ax", "PPfi", defines={"U": u}) for u in (1, 4)}, go)

def workload(rt):
    x = rt.upload(np.random.default_rng(7).standard_normal(64, dtype=np.float32))
    y = rt.buffer(64)
    rt.tune(AX, y, x, 1.7, 64)
    return y
"""

# A production process: the workload's result's bits, and each miss as the statistics say it.
SERVE = """
import json, runpy, sys, warmcli
from warmcli.execution.process_mode import active_collector
rt = warmcli.runtime("host")
y = rt.read(runpy.run_path(sys.argv[1])["workload"](rt))
misses = [m.line() for m in active_collector().reader().misses()]
print(json.dumps({"bits": y.tobytes().hex(), "misses": misses}))
"""


def test_a_launch_function_edited_to_refuse_the_bundles_pick_measures_it_again(
    warm, tmp_path: Path
) -> None:
    work, bundle = tmp_path / "w.py", tmp_path / "b.warm"
    work.write_text(V1)
    proc = warm("run", work, "-b", bundle, "-q")
    assert proc.returncode == 0, proc.stderr
    pick = "u4"
    work.write_text(V1.replace("REFUSED = None", "REFUSED = '4'"))
    cold = warm.production(SERVE, work)
    hot = warm.production(SERVE, work, bundle=bundle)
    assert hot["bits"] == cold["bits"]  # (before: AssertionError in production)
    (miss,) = hot["misses"]
    assert miss.startswith("tune ax float32[64] float32[64] 1.7 64: launch: the launch function")
    assert f"refuses the bundle's pick {pick!r} (AssertionError: no U=4), which a cold" in miss
    proc = warm("verify", bundle, "--workload", work)  # names it, as a miss (before: exit 2)
    assert proc.returncode == 1, proc.stderr
    assert f"launch: the launch function here refuses the bundle's pick {pick!r}" in proc.stdout
    proc = warm("run", work, "-b", bundle, "--json")  # re-warms that tune only
    assert proc.returncode == 0, proc.stderr
    stored = json.loads(proc.stdout)["stored"]
    assert (stored["kernels"], stored["tunes"]) == (0, 1), stored
    served = warm.with_env(WARM_STRICT="1").production(SERVE, work, bundle=bundle)
    assert served == {"bits": cold["bits"], "misses": []}  # (u1, which it runs)
