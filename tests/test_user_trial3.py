"""What a new user, reading only the README, hit in round 3 with workloads of their own.

Through the real CLI in a subprocess, on real files: a workload that asks for
`warmcli.runtime()` itself (a second runtime, as production code does) has what it
launches there stored by `warm run`, so `warm verify --workload` and production agree
with the verify pass that the bundle is complete; an `--arch` pre-build of a tune whose
every candidate fails to compile is exit 2 with each candidate's error, as on a device
that executes, not a pending tune stored and "the bundle is complete".
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm

TWO_RUNTIMES = """\
import numpy as np
import warmcli
from warmcli import Kernel

DEVICE = "host"
INC = Kernel("void inc(int *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")
DBL = Kernel("void dbl(int *x, int n) { for (int i = 0; i < n; i++) x[i] *= 2; }", "dbl", "Pi")

def workload(rt):
    other = warmcli.runtime("host")
    x = rt.upload(np.ones(4, np.int32))
    rt.launch(INC, x, 4)
    other.launch(DBL, other.upload(np.ones(4, np.int32)), 4)
"""


def test_what_a_workload_launches_on_warmcli_runtime_is_stored(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    script = workload_file(TWO_RUNTIMES)
    proc = warm("run", script, "-b", bundle_path, "--quiet")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "stored 2 new kernel(s)" in proc.stdout
    proc = warm("verify", bundle_path, "--workload", script, "--quiet")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)


ALL_FAIL_CUDA = """\
from warmcli import Kernel, Tunable

DEVICE = "cuda"
SRC = 'extern "C" __global__ void f(float *x, int n) { if (threadIdx.x < n) x[0] = BROKEN + U; }'
T = Tunable(
    "f",
    {f"v{u}": Kernel(SRC, "f", "Pi", defines={"U": u}, language="cuda") for u in (1, 2)},
    lambda rt, k, x, n, *, stream=None: rt.launch(k, x, n, grid=1, block=32, stream=stream),
)

def workload(rt):
    rt.tune(T, rt.buffer(4, "float32"), 4)
"""


def test_an_arch_prebuild_whose_every_candidate_fails_to_compile_is_an_error(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    from warmcli.backends.cuda.nvrtc import find_nvrtc

    if find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    script = workload_file(ALL_FAIL_CUDA)
    run = ("run", script, "-b", bundle_path, "--arch", "sm_90", "--compiler", "nvrtc", "--no-ptx")
    proc = warm(*run, "--quiet")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr
    assert "every candidate failed" in proc.stderr
    assert proc.stderr.count('identifier "BROKEN" is undefined') == 2, proc.stderr
    assert not bundle_path.exists()
