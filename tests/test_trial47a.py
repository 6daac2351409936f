"""trial47a: a host (C) project adopting warm from the README alone, in awkward environments: an
optional kernel (a fast path whose compiler may be missing, a numpy fallback), odd paths and
environment variables, two warmings of one bundle at once. Each test failed before its fix.
Each `warm` command a fork of a process that imported the CLI once (`tests/forked_cli.py`:
none here is of how a process starts); the cold and `can_build` scripts started as Python."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# A fast path the workload can do without: where no compiler builds it, nor the bundle serves
# it, `rt.can_build` says so before any launch, and the workload takes its numpy fallback.
OPTIONAL = """
import numpy as np
from warmcli import Kernel

FAST = Kernel("void scale(float *x, int n) { for (int i = 0; i < n; i++) x[i] = x[i] * 2 + 1; }",
              "scale", "Pi")


def compute(rt):
    x = np.arange(16, dtype=np.float32) / 3
    if not rt.can_build(FAST):
        return x * np.float32(2) + np.float32(1)
    buf = rt.upload(x)
    rt.launch(FAST, buf, 16)
    return rt.read(buf)


def workload(rt):
    print("path", "fast" if rt.can_build(FAST) else "fallback")
    print("result", compute(rt).tobytes().hex())
"""

# A workload that catches the launch's ToolchainError itself, as pytest does a test's error.
CATCHING = """
from warmcli import Kernel
from warmcli.errors import ToolchainError

K = Kernel("void k(float *x) { x[0] = 1; }", "k", "P")


def workload(rt):
    try:
        rt.launch(K, rt.buffer(1))
    except ToolchainError:
        pass
"""

COLD = """
import runpy, sys, warmcli
module = runpy.run_path(sys.argv[1])
print(module["compute"](warmcli.runtime("host")).tobytes().hex())
"""


def _cold(warm: Warm, workload: Path, **env: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", COLD, str(workload)],
        capture_output=True,
        text=True,
        env=dict(warm.env, WARM_BUNDLE="", **env),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_optional_kernel_without_its_compiler(warm: Warm, tmp_path: Path) -> None:
    workload = tmp_path / "opt.py"
    workload.write_text(OPTIONAL)
    bundle = tmp_path / "opt.warm"
    missing = warm.with_env(WARM_CC=str(tmp_path / "no-such-cc"))
    done = missing("run", workload, "--bundle", bundle, "--allow-discarded-reads")
    assert done.returncode == 0, done.stderr
    assert "path fast" not in done.stdout and "Traceback" not in done.stderr
    results = {line.split()[1] for line in done.stdout.splitlines() if line.startswith("result")}
    assert results == {_cold(missing, workload, WARM_CC=str(tmp_path / "no-such-cc"))}
    done = missing("verify", bundle, "--workload", workload, "--allow-discarded-reads")
    assert done.returncode == 0, done.stderr
    # With its compiler, the same workload warms the fast path, served after.
    done = warm("run", workload, "--bundle", bundle, "--allow-discarded-reads")
    assert done.returncode == 0, done.stderr
    assert "path fallback" not in done.stdout
    assert "stored 1 new kernel(s)" in done.stdout


def test_caught_toolchain_error_still_fails_the_run(warm: Warm, tmp_path: Path) -> None:
    workload = tmp_path / "catching.py"
    workload.write_text(CATCHING)
    done = warm.with_env(WARM_CC=str(tmp_path / "no-such-cc"))(
        "run", workload, "--bundle", tmp_path / "c.warm", "--json"
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not found" in json.loads(done.stdout)["error"]


# A CUDA fast path pre-built for sm_90 beside a host kernel, nvcc missing: the host kernel is
# stored, the CUDA launch skipped, and the run exits 0.
CUDA_OPTIONAL = """
import numpy as np
import warmcli
from warmcli import Kernel

DEVICE = "cuda"
CU = Kernel('extern "C" __global__ void twice(float *x) { x[threadIdx.x] *= 2; }', "twice", "P",
            language="cuda")
H = Kernel("void inc(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")


def workload(rt):
    host = warmcli.runtime("host")
    host.launch(H, host.upload(np.ones(8, np.float32)), 8)
    if rt.can_build(CU):
        rt.launch(CU, rt.upload(np.ones(8, np.float32)), block=8)
    else:
        print("fallback")
"""


def test_optional_cuda_kernel_without_nvcc(warm: Warm, tmp_path: Path) -> None:
    workload = tmp_path / "cu.py"
    workload.write_text(CUDA_OPTIONAL)
    missing = warm.with_env(WARM_CUDA_COMPILER="nvcc", WARM_NVCC=str(tmp_path / "no-nvcc"))
    done = missing("run", workload, "--arch", "sm_90", "--bundle", tmp_path / "cu.warm")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("fallback") == 3
    assert "stored 1 new kernel(s)" in done.stdout


def test_can_build_refuses_what_is_no_kernel(warm: Warm) -> None:
    code = "import warmcli; warmcli.runtime('host').can_build('scale')"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=warm.env, timeout=60
    )
    assert "TypeError: rt.can_build: kernel must be a Kernel, not str" in done.stderr


# A workload that moves to its data folder as it is imported, as scripts that read files
# beside them do: the paths warm's command line and environment named are the caller's.
CHDIR = """
import os
from warmcli import Kernel

os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
K = Kernel("void k(float *x) { x[0] = 7; }", "k", "P")


def workload(rt):
    rt.launch(K, rt.buffer(1))
"""


def test_relative_paths_are_the_callers_though_the_workload_moves(
    warm: Warm, tmp_path: Path
) -> None:
    (tmp_path / "app" / "data").mkdir(parents=True)
    (tmp_path / "app" / "w.py").write_text(CHDIR)
    done = warm("run", "app/w.py", "--bundle", "rel.warm", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "bundle rel.warm: stored 1 new kernel(s)" in done.stdout
    assert (tmp_path / "rel.warm").is_file()
    done = warm("verify", "rel.warm", "--workload", "app/w.py", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    done = warm.with_env(WARM_BUNDLE="env.warm", WARM_HOME="home")("run", "app/w.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "env.warm").is_file()
    done = warm.with_env(WARM_HOME="home")("run", "app/w.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "home" / "bundle.warm").is_file()
    assert not list((tmp_path / "app" / "data").glob("**/*.warm"))


def test_a_dask_run_verifies_the_callers_bundle(
    warm: Warm, tmp_path: Path, dask_scheduler: str
) -> None:
    (tmp_path / "app" / "data").mkdir(parents=True)
    (tmp_path / "app" / "w.py").write_text(CHDIR)
    done = warm("run", "app/w.py", "-b", "dk.warm", "--dask", dask_scheduler, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "verify: compiled 0 kernels" in done.stdout


SUITE_TEST = """
import numpy as np
import pytest
import warmcli
from warmcli import Kernel

FAST = Kernel("void s(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "s", "Pi")


def test_fast_path():
    rt = warmcli.runtime("host")
    if not rt.can_build(FAST):
        pytest.skip("no C compiler here")
    rt.launch(FAST, rt.upload(np.zeros(4, np.float32)), 4)
"""

SUITE = """
import pytest


def workload(rt):
    code = pytest.main(["-q", "-p", "no:cacheprovider", FOLDER])
    if code not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        raise RuntimeError(f"pytest exited {code!r}")
"""


def test_a_suite_skipping_its_optional_kernel_warms_and_one_not_asking_fails(
    warm: Warm, tmp_path: Path
) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_fast.py").write_text(SUITE_TEST)
    (tmp_path / "warm_tests.py").write_text(SUITE.replace("FOLDER", repr(str(tmp_path / "tests"))))
    missing = warm.with_env(WARM_CC=str(tmp_path / "no-such-cc"))
    done = missing("run", tmp_path / "warm_tests.py", "-b", tmp_path / "s.warm", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("1 skipped") == 3
    unasked = SUITE_TEST.replace("if not rt.can_build(FAST):", "if False:")
    (tmp_path / "tests" / "test_fast.py").write_text(unasked)
    done = missing("run", tmp_path / "warm_tests.py", "-b", tmp_path / "s.warm", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "not found" in done.stderr


def test_a_file_named_like_an_option_is_told_how_to_name_it(warm: Warm, tmp_path: Path) -> None:
    (tmp_path / "-w.py").write_text(CATCHING.replace("except ToolchainError", "except OSError"))
    done = warm("run", "-w.py", "-b", "w.warm", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "-w.py is a file here: name it ./-w.py" in done.stderr, done.stderr
    (tmp_path / "-b.warm").write_bytes(b"")
    done = warm("stats", "-b.warm", cwd=tmp_path)
    assert "-b.warm is a file here: name it ./-b.warm" in done.stderr, done.stderr
    done = warm("run", "./-w.py", "-b", "w.warm", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
