"""A CI engineer's GPU-less pre-build (`warm run --arch`), gated by what warm prints.

Real parts only: the CLI in a subprocess, NVRTC and nvcc compiling for real without a
GPU, real SQLite bundles. What a CI script reads must be true: `stored` is what a run
added (two jobs building one bundle at once add it once between them); an architecture
the chosen compiler does not build is refused before the first pass, as warm's input, not
blamed on the workload's line (while a compiler that is not there is no error until a
kernel must be built); an `--arch` error says what an architecture is, and GPU work at
import says the pre-build has no GPU.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.cuda.nvrtc import find_nvrtc

if find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
    pytest.skip("NVRTC not installed (cuda-bindings, nvidia-cuda-nvrtc)", allow_module_level=True)

# Two kernels; on its first call (the CompileOnly pass, which only looks the bundle up and
# queues) the workload waits until as many jobs as BARRIER_COUNT have got there too, so
# every job has found the bundle empty before any of them stores.
TWO_JOBS = r'''
import os, time
from warmcli import Kernel
DEVICE = "cuda"
SRC = """extern "C" __global__ void k(float *y, int n) {
    int i = threadIdx.x; if (i < n) y[i] = y[i] * F;
}"""
KS = [Kernel(SRC, "k", "Pi", language="cuda", defines={"F": f"{i}.5f"}) for i in range(2)]
CALLS = [0]
def workload(rt):
    y = rt.buffer(64)
    for k in KS:
        rt.launch(k, y, 64, grid=1, block=64)
    CALLS[0] += 1
    if CALLS[0] == 1:
        folder = os.environ["BARRIER"]
        open(os.path.join(folder, str(os.getpid())), "w").close()
        deadline = time.monotonic() + 120
        while len(os.listdir(folder)) < int(os.environ["BARRIER_COUNT"]):
            assert time.monotonic() < deadline, "the other job never came"
            time.sleep(0.05)
'''


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


def _kernel_rows(bundle: Path) -> list[tuple[str, str, float]]:
    with sqlite3.connect(f"file:{bundle}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT key, sha256, created FROM kernels ORDER BY key")
        return [(str(k), str(s), float(c)) for k, s, c in rows]


def test_two_jobs_building_one_bundle_at_once_count_what_each_added(
    warm: Warm, tmp_path: Path
) -> None:
    """Both jobs said `stored 2 new kernel(s)` (JSON `stored.kernels` 2 each) for a bundle
    that holds 2 kernels: the later one rewrote the rows the first had stored, and counted
    them as its own. A CI script summing what its jobs added counted every kernel twice."""
    workload = tmp_path / "two_jobs.py"
    workload.write_text(TWO_JOBS)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    bundle = tmp_path / "shared.warm"
    jobs = Warm(dict(warm.env, BARRIER=str(barrier), BARRIER_COUNT="2"))
    args = ("run", workload, "--arch", "sm_90", "--no-ptx", "--compiler", "nvrtc")
    started = [jobs.popen(*args, "-b", bundle, "--json") for _ in range(2)]
    outputs = [p.communicate(timeout=240) for p in started]
    for proc, (out, err) in zip(started, outputs, strict=True):
        assert proc.returncode == 0, err + out
    stored = [json.loads(out)["stored"]["kernels"] for out, _ in outputs]
    rows = _kernel_rows(bundle)
    assert len(rows) == 2
    assert sorted(stored) == [0, 2], stored  # one job added both, the other nothing
    # The job that added nothing says so in its pass table too ("into bundle").
    for (out, _), n in zip(outputs, stored, strict=True):
        compile_pass = json.loads(out)["passes"][1]["compilation"]
        assert compile_pass["stored"] == n, compile_pass

    # A third run of the same inputs adds nothing and leaves every row as it was.
    again = warm.with_env(BARRIER=str(barrier), BARRIER_COUNT="0")
    third = again(*args, "-b", bundle, "--json")
    assert third.returncode == 0, third.stderr
    assert json.loads(third.stdout)["stored"] == {"kernels": 0, "tunes": 0}
    assert [(k, s) for k, s, _ in _kernel_rows(bundle)] == [(k, s) for k, s, _ in rows]


ONE = r'''
from warmcli import Kernel
DEVICE = "cuda"
K = Kernel("""extern "C" __global__ void one(float *y, int n) { if (threadIdx.x < n) y[0] = n; }""",
           "one", "Pi", language="cuda")
def workload(rt):
    rt.launch(K, rt.buffer(64), 64, grid=1, block=1)
'''


@pytest.mark.parametrize("compiler", ["nvrtc", "nvcc"])
def test_an_arch_the_compiler_does_not_build_is_refused_before_the_first_pass(
    warm: Warm, tmp_path: Path, compiler: str
) -> None:
    """It was blamed on the workload's launch line, in whichever pass first keyed a kernel:
    `warm: error: workload raised during CompileOnly: w.py:7: ArchError: nvcc 13.0 does not
    build sm_35; ...`, as if the workload were wrong, not the command line."""
    workload = tmp_path / "w.py"
    workload.write_text(ONE)
    bundle = tmp_path / "b.warm"
    options = ("--arch", "sm_35", "--compiler", compiler, "-b", bundle)
    proc = warm("run", workload, *options)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "does not build sm_35; it builds sm_75" in lines[0], proc.stderr
    assert "workload raised" not in proc.stderr and "w.py" not in proc.stderr, proc.stderr
    assert not proc.stdout and not bundle.exists() and not Path(f"{bundle}.lock").exists()
    as_json = warm("run", workload, *options, "--json")
    assert as_json.returncode == 2 and json.loads(as_json.stdout)["exit"] == 2
    assert "does not build sm_35" in json.loads(as_json.stdout)["error"], as_json.stdout


def test_a_run_over_a_bundle_holding_all_it_reaches_needs_no_compiler(
    warm: Warm, tmp_path: Path
) -> None:
    """A rerun (a fleet's run measuring the pre-build's tunes, a CI rerun) compiles nothing:
    a compiler that is not there is no error until a kernel must be built."""
    workload = tmp_path / "w.py"
    workload.write_text(ONE)
    bundle = tmp_path / "b.warm"
    made = warm("run", workload, "--arch", "sm_90", "-b", bundle, "-q")
    assert made.returncode == 0, made.stderr
    again = warm("run", workload, "--arch", "sm_90", "--nvcc", "/nonexistent/nvcc", "-b", bundle)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "stored 0 new kernel(s)" in again.stdout
    # With a kernel to build, it is the launch that needed it that fails, naming why.
    missing = warm("run", workload, "--arch", "sm_80", "--nvcc", "/nonexistent/nvcc", "-b", bundle)
    assert missing.returncode == 2 and "/nonexistent/nvcc" in missing.stderr, missing.stderr


GPU_AT_IMPORT = r'''
import warmcli
from warmcli import Kernel
DEVICE = "cuda"
K = Kernel("""extern "C" __global__ void k(float *y, int n) { }""", "k", "Pi", language="cuda")
RT = warmcli.runtime({device})
RT.launch(K, RT.buffer(64), 64, grid=1, block=1)
def workload(rt):
    rt.launch(K, rt.buffer(64), 64, grid=1, block=1)
'''


@pytest.mark.parametrize("device", ["", "'cuda'"])
def test_gpu_work_at_import_in_a_gpu_less_prebuild_says_so(
    warm: Warm, tmp_path: Path, device: str
) -> None:
    """With `--arch sm_90` given, it said `workload failed to import: DeviceError: no CUDA
    device found: ...; to compile without a GPU, give the architecture: --arch sm_90` (or,
    for `runtime()`, `the host device compiles C kernels, not 'cuda' ones`)."""
    workload = tmp_path / "gpu_import.py"
    workload.write_text(GPU_AT_IMPORT.replace("{device}", device))
    bundle = tmp_path / "g.warm"
    for command in (("run", workload, "-b", bundle), ("verify", bundle, "--workload", workload)):
        if command[0] == "verify":
            ok = tmp_path / "ok.py"
            ok.write_text(ONE)
            made = warm("run", ok, "--arch", "sm_90", "-b", bundle, "-q")
            assert made.returncode == 0, made.stderr
        proc = warm(*command, "--arch", "sm_90")
        assert proc.returncode == 2, proc.stdout + proc.stderr
        error = proc.stderr.strip().splitlines()[-1]
        assert f"{workload}:7: workload failed to import" in error, proc.stderr
        assert "at import" in error and "--arch" in error, error
        assert "give the architecture" not in error and "C kernels" not in error, error
        assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("arch", ["sm_1000", "sm_9", "SM_90", "sm_90,sm_80", ""])
def test_an_arch_that_is_no_sm_number_says_what_one_is(
    warm: Warm, tmp_path: Path, arch: str
) -> None:
    """`sm_1000` said `'sm_1000' is not a CUDA architecture: expected sm_<number>`, and it
    is one: the form is sm_ and two or three digits (an a or f after, for sm_90a, sm_100f)."""
    workload = tmp_path / "w.py"
    workload.write_text(ONE)
    bundle = tmp_path / "b.warm"
    proc = warm("run", workload, "--arch", arch, "-b", bundle)
    assert proc.returncode == 2 and not bundle.exists(), proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "two or three digits" in lines[0], proc.stderr


@pytest.mark.parametrize(
    ("arch", "use"),
    [("compute_90a", "sm_90a"), ("compute_100f", "sm_100f"), ("compute_80a", "sm_80 ")],
)
def test_a_virtual_arch_names_the_gpu_arch_with_its_suffix(
    warm: Warm, tmp_path: Path, arch: str, use: str
) -> None:
    """`--arch compute_90a` said `use sm_90`, which builds no arch-specific (wgmma) code."""
    workload = tmp_path / "w.py"
    workload.write_text(ONE)
    proc = warm("run", workload, "--arch", arch, "-b", tmp_path / "b.warm")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"use {use}" in lines[0], proc.stderr


@pytest.mark.parametrize("compiler", ["nvrtc", "nvcc"])
def test_verify_for_an_arch_the_compiler_does_not_build_names_the_misses(
    warm: Warm, tmp_path: Path, compiler: str
) -> None:
    """A replay serves, it builds nothing: asked for `sm_35` (which NVRTC 13 does not build)
    over an `sm_90` bundle, it names each kernel missed, exit 1, as `warm check` says it is
    not servable there; the run's refusal of such an arch is no replay's. With nvcc it said
    `workload raised during Verify (CompileOnly): w.py:7: ArchError: nvcc 13.0 does not
    build sm_35; ...` (exit 2)."""
    workload = tmp_path / "w.py"
    workload.write_text(ONE)
    bundle = tmp_path / "b.warm"
    made = warm("run", workload, "--arch", "sm_90", "--compiler", compiler, "-b", bundle, "-q")
    assert made.returncode == 0, made.stderr
    replay = ("verify", bundle, "--workload", workload, "--arch", "sm_35")
    proc = warm(*replay, "--compiler", compiler)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "miss: kernel one: arch:" in proc.stdout and "sm_35" in proc.stdout, proc.stdout


def test_a_two_arch_prebuild_keeps_the_highest_arch_ptx(warm: Warm, tmp_path: Path) -> None:
    """Checking up front that the compiler builds each arch must not make the compiler
    before it is told which PTX to keep (it then kept none)."""
    workload = tmp_path / "w.py"
    workload.write_text(ONE)
    bundle = tmp_path / "b.warm"
    made = warm("run", workload, "--arch", "sm_80", "--arch", "sm_90", "-b", bundle, "-q")
    assert made.returncode == 0, made.stderr
    archs = sorted(k["arch"] for k in warm.json("stats", bundle)["kernels"])
    assert archs == ["compute_90", "sm_80", "sm_90"], archs
