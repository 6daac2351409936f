"""Loading a warm-built host library never changes the process's floating-point state.

A kernel compiled `-shared` with `-ffast-math` (or `-Ofast`) gets GCC's crtfastmath
constructor, which sets flush-to-zero and denormals-are-zero for the whole process when
the library loads. A tune miss loads every candidate's library, a hit only the pick's:
without the state kept, numpy and every other kernel computed subnormals as 0.0 in a
cold process and as 1e-40 in a hot one. Real compiles, real `warm run` (forked), fresh
processes: the production processes are started (`Warm(warm.env).production`), never
forked, since a fork would begin in its server's floating-point state, not a fresh one's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

WORKLOAD = """\
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
BODY = ("void axpy(float *y, const float *x, float a, int n) { for (int r = 0; r < REP; r++)"
        " for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i] * (r == REP - 1); }")
CANDS = {
    "plain": Kernel(BODY, "axpy", "PPfi", defines={"REP": 1}),
    # a fast-math variant, far slower: measured (so loaded), never picked
    "fastmath": Kernel(BODY, "axpy", "PPfi", defines={"REP": 20000}, options=("-ffast-math",)),
}

def launch(rt, k, y, x, a, n, *, stream=None):
    rt.launch(k, y, x, a, n, stream=stream)

AXPY = Tunable("axpy", CANDS, launch)
SCALE = Kernel("void scale(float *y, float s, int n) { for (int i = 0; i < n; i++) y[i] *= s; }",
               "scale", "Pfi")

def workload(rt):
    y = rt.buffer(4)
    x = rt.upload(np.ones(4, np.float32))
    pick = rt.tune(AXPY, y, x, 1.0, 4)
    z = rt.upload(np.full(4, 1e-30, np.float32))
    rt.launch(SCALE, z, 1e-10, 4)  # 1e-40: a subnormal float32
    return pick, z
"""

PRODUCTION = """\
import json, sys
import numpy as np
import warmcli
sys.path.insert(0, sys.argv[1])
import fm
rt = warmcli.runtime("host")
pick, z = fm.workload(rt)
print(json.dumps({"pick": pick, "kernel": rt.read(z).tolist(),
                  "numpy": float(np.float32(1e-30) * np.float32(1e-10))}))
"""

SUBNORMAL = float(__import__("numpy").float32(1e-30) * __import__("numpy").float32(1e-10))


def test_a_fast_math_candidate_leaves_cold_and_hot_processes_computing_alike(
    warm: Warm, tmp_path: Path
) -> None:
    (tmp_path / "fm.py").write_text(WORKLOAD)
    cold = Warm(warm.env).production(PRODUCTION, tmp_path)  # no bundle: the tune measures both
    bundle = tmp_path / "fm.warm"
    proc = warm("run", tmp_path / "fm.py", "-b", bundle, "-q")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    hot = Warm(warm.env).production(PRODUCTION, tmp_path, bundle=bundle)  # only the pick loads
    assert cold["pick"] == hot["pick"] == "plain"
    assert SUBNORMAL > 0.0
    assert cold == hot
    assert cold["numpy"] == SUBNORMAL
    assert cold["kernel"] == [SUBNORMAL] * 4


LOADS = """\
import json, sys
import numpy as np
from warmcli.backends.host import HostDevice
before = float(np.float32(1e-30) * np.float32(1e-10))
device = HostDevice()
device.load_module(open(sys.argv[1], "rb").read())
after_warm = float(np.float32(1e-30) * np.float32(1e-10))
import ctypes
ctypes.CDLL(sys.argv[1])  # the same library loaded as anyone else would: its constructor runs
after_plain = float(np.float32(1e-30) * np.float32(1e-10))
print(json.dumps([before, after_warm, after_plain]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="GCC's crtfastmath: Linux")
@pytest.mark.parametrize("flag", ["-ffast-math", "-Ofast", "-funsafe-math-optimizations"])
def test_loading_a_fast_math_library_leaves_ftz_and_daz_as_they_were(
    tmp_path: Path, flag: str
) -> None:
    from warmcli.backends.host.compiler import host_cc

    library = tmp_path / "fm.so"
    source = tmp_path / "fm.c"
    source.write_text("void f(float *x) { x[0] = 1; }\n")
    built = subprocess.run(
        [host_cc(), "-O2", "-fPIC", "-shared", flag, "-o", library, source],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    proc = subprocess.run(
        [sys.executable, "-c", LOADS, library], capture_output=True, text=True, env=None
    )
    assert proc.returncode == 0, proc.stderr
    before, after_warm, after_plain = json.loads(proc.stdout)
    if after_plain != 0.0:
        pytest.skip(f"this compiler's {flag} library sets no flush-to-zero when it loads")
    assert before == after_warm == SUBNORMAL
