"""trial58a: a user's own workloads, a cold start, a miss and a hit compared (the real CLI, the
real C compiler, NVRTC where installed, no mocks).

A kernel whose source, options or defines spell `__TIME__`, `__DATE__` or `__TIMESTAMP__` has
its build's time compiled in. Its key could not cover that: `warm run` stored the build, and
every later process was served the time of that run where a cold start computed its own
(`x[0] = seconds of __TIME__`: 1685 served, 1689 cold, three seconds apart). The clock is one
input of the build no key can hold, so such a kernel is unkeyed now (`warmcli.build_clock`):
built in each process, never stored, and a miss says why. Shown here without waiting on a
clock: gcc takes `__DATE__` and `__TIME__` from `SOURCE_DATE_EPOCH` where it is set, so a
warm run at one epoch and a production process at another tell a served build from one of
its own.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.cuda.nvrtc import find_nvrtc

# Seconds into the day of the build, as `__TIME__` ("hh:mm:ss") spells it.
STAMP = r"""
import numpy as np
from warmcli import Kernel

DEVICE = "host"
K = Kernel(
    "{head}void stamp(float *x) {{ const char *t = CLOCK; "
    "x[0] = ((t[0]-'0')*10 + (t[1]-'0'))*3600 + ((t[3]-'0')*10 + (t[4]-'0'))*60 "
    "+ (t[6]-'0')*10 + (t[7]-'0'); }}",
    "stamp", "P", {how},
)

def workload(rt):
    x = rt.upload(np.zeros(1, np.float32))
    rt.launch(K, x)
    return x
"""

# The workload run as production runs it, the value it computes and what it compiled itself.
SERVE = """
import importlib.util, json, sys
import warmcli
spec = importlib.util.spec_from_file_location("w", sys.argv[1])
w = importlib.util.module_from_spec(spec)
spec.loader.exec_module(w)
rt = warmcli.runtime("host")
x = float(rt.read(w.workload(rt))[0])
print(json.dumps({"x": x, "compiled": len(warmcli.report().kernels)}))
"""

LAST_SECOND = 86399  # 23:59:59 of 1970-01-01
# How the kernel spells the clock: (what its source opens with, its Kernel's arguments).
HOWS = {
    "define": ("", 'defines={"CLOCK": "__TIME__"}'),  # (the define's value)
    "option": ("", 'options=["-DCLOCK=__TIME__"]'),
    "header": (  # stamp.h, in its -I folder: `#define CLOCK __TIME__`
        '#include \\"stamp.h\\"\\n',
        'options=["-I" + __import__("os").path.dirname(__file__)]',
    ),
}


@pytest.mark.parametrize("how", sorted(HOWS))
def test_a_kernel_reading_the_clock_computes_its_own_time_cold_on_a_miss_and_on_a_hit(
    warm: Warm, tmp_path: Path, how: str
) -> None:
    """Warmed at 00:00:00 (SOURCE_DATE_EPOCH=0), run at 23:59:59: the bundle process computes
    what a cold start does, 86399 (before: 0, the warm run's time, served); the run stored
    nothing and said why (before: `stored 1 new kernel(s)`)."""
    workload = tmp_path / "w.py"
    head, given = HOWS[how]
    workload.write_text(STAMP.format(head=head, how=given))
    (tmp_path / "stamp.h").write_text("#define CLOCK __TIME__\n")
    done = warmed_at_midnight_served_at_its_last_second(warm, workload, tmp_path / "b.warm")
    said = "never served (its build reads the clock (__TIME__)" + " in a header" * (how == "header")
    assert said in done.stdout, done.stdout


def warmed_at_midnight_served_at_its_last_second(
    warm: Warm, workload: Path, bundle: Path
) -> subprocess.CompletedProcess[str]:
    """`warm run` of `workload` into `bundle` at 00:00:00 (SOURCE_DATE_EPOCH=0), then the
    workload served at 23:59:59, cold and from `bundle`: both compute 86399, the bundle's
    process by building the kernel itself, and the run stored nothing; the run's outcome."""
    done = warm.with_env(SOURCE_DATE_EPOCH="0")("run", workload, "--bundle", bundle)
    assert done.returncode == 0, done.stderr
    later = warm.with_env(SOURCE_DATE_EPOCH=str(LAST_SECOND))
    cold = later.production(SERVE, workload)
    hit = later.production(SERVE, workload, bundle=bundle)
    assert cold["x"] == hit["x"] == LAST_SECOND, (cold, hit)
    assert hit["compiled"] == 1  # built by the process itself, as a cold start builds it
    assert "stored 0 new kernel(s)" in done.stdout, done.stdout
    return done


def test_a_kernel_of_no_clock_is_still_served(warm: Warm, tmp_path: Path) -> None:
    """The same kernel with a fixed time in place of `__TIME__` is stored and served (its
    key unchanged: nothing else is unkeyed), its value the one it was built with."""
    workload = tmp_path / "w.py"
    workload.write_text(STAMP.format(head="", how="defines={'CLOCK': '\"12:00:01\"'}"))
    bundle = tmp_path / "b.warm"
    done = warm("run", workload, "--bundle", bundle)
    assert done.returncode == 0, done.stderr
    assert "stored 1 new kernel(s)" in done.stdout, done.stdout
    hit = warm.production(SERVE, workload, bundle=bundle)
    assert hit == {"x": 43201.0, "compiled": 0}


@pytest.mark.skipif(find_nvrtc() is None, reason="NVRTC not installed")
def test_a_cuda_prebuild_stores_no_kernel_reading_the_clock(warm: Warm, tmp_path: Path) -> None:
    """`--arch sm_90` (NVRTC, no GPU): a kernel spelling `__DATE__` is not stored (before: its
    cubin and PTX were), its neighbour is; `warm stats --json` lists the neighbour alone."""
    workload = tmp_path / "c.py"
    workload.write_text(
        "from warmcli import Kernel\n"
        'DEVICE = "cuda"\n'
        "DATED = Kernel('extern \"C\" __global__ void dated(char *x) { x[0] = __DATE__[0]; }',"
        ' "dated", "P", language="cuda")\n'
        "PLAIN = Kernel('extern \"C\" __global__ void plain(char *x) { x[0] = 1; }',"
        ' "plain", "P", language="cuda")\n'
        "def workload(rt):\n"
        "    x = rt.buffer(1, 'uint8')\n"
        "    rt.launch(DATED, x, grid=1, block=1)\n"
        "    rt.launch(PLAIN, x, grid=1, block=1)\n"
    )
    bundle = tmp_path / "c.warm"
    done = warm("run", workload, "--arch", "sm_90", "--bundle", bundle)
    assert done.returncode == 0, done.stderr
    assert "kernel dated is built in each process, never served" in done.stdout, done.stdout
    held = json.loads(warm("stats", bundle, "--json").stdout)
    assert {k["entry"] for k in held["kernels"]} == {"plain"}
