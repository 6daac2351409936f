"""trial53g: warm in a long-running production service: memory, descriptors, a bundle replaced.

What was wrong:

- A serving process with dynamic shapes (a tune key per distinct size) kept every tune its
  bundle served, twice (the tune cache's record, the runtime's note that its pick is served
  here), for as long as it lived: ~1.8 kB of RSS a distinct size, 10,000 sizes served from a
  bundle warmed with them 40.6 -> 58.3 MB, still growing. Now the last `TUNES_KEPT` (4,096)
  served tunes are kept, the least recently used dropped and read again from the bundle at its
  next use (the same row: still a hit, never measured): 10,000 sizes 40.6 -> 50.4 MB, flat from
  about 4,000 on. A tune measured in the process is never dropped (its pick stays the one it
  launched; its write-back needs it).

What held (measured on a host service warmed by `warm run`, no fix needed): 100,000 launches of
one kernel, 100,000 tune hits over 50 sizes, 100,000 buffers uploaded, launched, read and dropped:
RSS flat within 0.6 MB, 7 descriptors, 1 thread throughout; a `ThreadingHTTPServer` serving
15,000 requests from 8 client threads (a thread a request) at 9 descriptors and 2 threads; 3
pre-forked children of it serving right while `warm clean --tune` and `--max-size 0` emptied the
bundle; `mv`, `cp` over, `warm clean` of the file under a serving process: every result right.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm

WORKLOAD = """
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void add(float *x, int n) { for (int i = 0; i < n; i += STEP) x[i] += 1; }"


def launch_add(rt, kernel, x, n, *, stream=None):
    rt.launch(kernel, x, n, stream=stream)


ADD = Tunable(
    name="add",
    candidates={
        "int": Kernel(SRC, "add", "Pi", defines={"STEP": 1}),
        "float": Kernel(SRC.replace("+= 1;", "+= 1.0f;"), "add", "Pi", defines={"STEP": 1}),
    },
    launch=launch_add,
)
SIZES = range(1, 25)


def workload(rt):
    for n in SIZES:
        rt.tune(ADD, rt.upload(np.zeros(n, dtype=np.float32)), n)
"""

# A service over the bundle, its memo bound set to 8 (the default, 4,096, would need that many
# tunes): every size served twice in turn, so each is dropped before it is reached again.
SERVE = """
import importlib, json, os, sys
import numpy as np
import warmcli

sys.path.insert(0, sys.argv[1])
for name in ("warmcli.runtime.tune", "warmcli.runtime.runtime"):
    setattr(importlib.import_module(name), "TUNES_KEPT", 8)
import wl

rt = warmcli.runtime("host")


def serve():
    picks, right = [], True
    for n in wl.SIZES:
        x = rt.upload(np.zeros(n, dtype=np.float32))
        picks.append(rt.tune(wl.ADD, x, n))
        right &= bool((rt.read(x) == 1).all())
    return picks, right


(first, right), (again, right_again) = serve(), serve()
pid = os.fork()  # a pre-fork worker: what its master dropped, it reads again by its own ids
if pid == 0:
    os._exit(0 if serve() == (first, True) and not warmcli.report().tunes else 1)
served = getattr(rt.tunes, "_served", ())
print(json.dumps({
    "held": len(rt.tunes._records) + len(served), "kept": len(rt._kept), "picks": first + again,
    "right": right and right_again, "missed": len(warmcli.report().tunes),
    "worker": os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]),
}))
"""


def test_a_service_keeps_a_bounded_number_of_served_tunes(warm: Warm, tmp_path: Path) -> None:
    (tmp_path / "wl.py").write_text(WORKLOAD)
    bundle = tmp_path / "app.warm"
    proc = warm("run", tmp_path / "wl.py", "--bundle", bundle, "--no-verify")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    out = warm.production(SERVE, tmp_path, bundle=bundle)
    assert out["right"] and out["missed"] == 0  # every tune served, dropped ones read again
    assert out["worker"] == 0  # a forked worker served them all too, the same picks
    assert out["picks"][:24] == out["picks"][24:]  # the same picks, read again
    assert out["held"] <= 8, out  # 24 before: every size served, kept
    assert out["kept"] <= 8, out


# No bundle: what the process measures is never dropped (the same pick, no second measuring,
# all of it there to write back), whatever the bound.
MEASURE = SERVE.replace("len(warmcli.report().tunes)", "len(rt.tunes.unpersisted())")


def test_a_tune_measured_here_is_never_dropped(warm: Warm, tmp_path: Path) -> None:
    (tmp_path / "wl.py").write_text(WORKLOAD)
    out = warm.with_env(WARM_BUNDLE="").production(MEASURE, tmp_path)
    assert out["right"] and out["picks"][:24] == out["picks"][24:] and out["worker"] == 0
    assert out["missed"] == 24  # each measured once, each kept to write back
