"""A tune holds no launch function's per-call workspace past its call: a buffer the launch
function made on every call (`ws = rt.buffer(n)`) was kept, with a copy, until the tune
ended, so a tune miss held every call's workspace twice (review34: a 64 MiB workspace, 3
candidates, `repeats=10`: 4.3 GB at peak). A kept buffer is now held weakly: one the app
dropped is neither held nor put back, and its copy is freed. The production process is started
(conftest's plain `Warm`), never forked: its peak memory (`ru_maxrss`) is what is measured.
"""

from __future__ import annotations

from conftest import Warm

CODE = """
import json, resource, numpy as np, warmcli
from warmcli import Kernel, Tunable
SRC = ("void k(float *x, float *ws, long n) "
       "{ for (long i = 0; i < n; i++) { ws[i] = x[i]; x[i] = ws[i] * 2; } }")
KS = {f"c{i}": Kernel(SRC, "k", "PPl", defines={"C": i}) for i in range(3)}
N = 1 << 20  # 4 MiB of float32 a workspace
def launch(rt, kernel, x, n, *, stream=None):
    ws = rt.buffer(N)  # the launch function's own, every call
    rt.launch(kernel, x, ws, n, stream=stream)
T = Tunable("ws", KS, launch, repeats=40)
rt = warmcli.runtime("host")
x = rt.upload(np.ones(N, np.float32))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
rt.tune(T, x, N)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"grew_mb": (after - before) / 1024, "x": float(rt.read(x)[0])}))
"""


def test_a_per_call_workspace_is_not_held_by_the_tune(warm: Warm) -> None:
    got = warm.production(CODE)  # a fresh process, no bundle: a cold tune
    assert got["x"] == 2.0, got  # the pick ran once, on the original contents
    assert got["grew_mb"] < 120, got  # 3 x 41 calls x 2 x 4 MiB held: about 1 GB before
