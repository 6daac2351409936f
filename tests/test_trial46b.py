"""Trial 46b: a CUDA developer with no GPU pre-builds a PyCUDA project for sm_80 and sm_90 in
CI, following the README's "PyCUDA code", "CUDA compilers" and "Explaining misses" alone.
Real CLI (each command a fork of a process that imported the CLI once, `tests/forked_cli.py`:
no test here is of how a process starts), real NVRTC (the venv's) and real bundles; nothing
faked."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm, nvcc_or_skip, nvrtc_release_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# The README's changed-import form of a PyCUDA program (`import warmcli.pycuda.autoinit`,
# `from warmcli.pycuda import SourceModule`), its GPU work in `workload(rt)`.
CHANGED_IMPORTS = '''
import numpy as np
import warmcli.pycuda.autoinit  # was: import pycuda.autoinit
from warmcli.pycuda import SourceModule

MOD = SourceModule("""
__global__ void twice(float *x, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = 2.0f * x[i];
}
""")

def workload(rt):
    x = rt.buffer(256, "float32")
    MOD.get_function("twice")(x, np.int32(256), block=(256, 1, 1), grid=(1, 1))
'''


def test_changed_import_autoinit_prebuilds_and_verifies_without_a_gpu(
    warm: Warm, tmp_path: Path
) -> None:
    """README: a program using `pycuda.autoinit` changes that import to
    `warmcli.pycuda.autoinit`, and `--arch sm_90` compiles on a machine with no GPU. Before
    the fix its import failed the pre-build with `DeviceError: it used a GPU at import`
    (the script did nothing on a GPU: warm's own module did), and `warm verify --workload
    --arch`, which takes no --pycuda, could never replay it."""
    nvrtc_release_or_skip()
    (tmp_path / "app.py").write_text(CHANGED_IMPORTS)
    bundle = tmp_path / "b.warm"
    run = warm("run", tmp_path / "app.py", "--arch", "sm_90", "-q", "-b", bundle)
    assert run.returncode == 0, run.stderr
    assert "the bundle is complete" in run.stdout
    verify = warm("verify", bundle, "--workload", tmp_path / "app.py", "--arch", "sm_90")
    assert verify.returncode == 0, verify.stderr + verify.stdout


def test_warm_explain_points_at_the_commands_that_explain(warm: Warm) -> None:
    """README's "Explaining misses and strict mode" names no `warm explain`; a user who types
    it was told only Click's `No such command 'explain'`: now one line naming where misses
    are explained (warm verify --workload, WARM_EXPLAIN=1) and a tune (warm stats --explain)."""
    done = warm("explain", "b.warm")
    assert done.returncode == 2
    line = done.stderr.strip()
    assert "\n" not in line and "Traceback" not in line
    assert "warm verify" in line and "--workload" in line and "WARM_EXPLAIN=1" in line
    assert "warm stats" in line and "--explain" in line


KERNEL_API = '''
from warmcli import Kernel

NEG = Kernel("""
extern "C" __global__ void negate(float *x, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = -x[i];
}
""", "negate", "Pi", language="cuda")

def workload(rt):
    x = rt.buffer(256, "float32")
    rt.launch(NEG, x, 256, grid=(1,), block=(256,))
'''


def test_stats_tells_apart_one_kernels_builds_by_nvcc_and_nvrtc(warm: Warm, tmp_path: Path) -> None:
    """README, CUDA compilers: a bundle warmed with NVRTC and then `--compiler nvcc` holds a
    build of each kernel by each (a `toolchain` miss while warming). `warm stats` listed them
    as rows alike but for their key (same device, kernel, options, source): now a `built by`
    column names each one's compiler and CUDA release where one kernel has several."""
    nvrtc = nvrtc_release_or_skip()
    nvcc_or_skip()
    (tmp_path / "k.py").write_text(KERNEL_API)
    bundle = tmp_path / "b.warm"
    for compiler in ("nvrtc", "nvcc"):
        done = warm("run", tmp_path / "k.py", "--arch", "sm_90", "--no-ptx", "--compiler",
                    compiler, "-q", "-b", bundle)  # fmt: skip
        assert done.returncode == 0, done.stderr
    stats = warm("stats", bundle).stdout
    header = next(line for line in stats.splitlines() if "kernel" in line and "key" in line)
    assert "built by" in header
    rows = [line for line in stats.splitlines() if " negate " in line]
    assert len(rows) == 2
    assert any(f"nvrtc {nvrtc[0]}.{nvrtc[1]}" in row for row in rows)
    assert any("nvcc 1" in row for row in rows)
    single = tmp_path / "single.warm"
    assert warm("run", tmp_path / "k.py", "--arch", "sm_90", "-q", "-b", single).returncode == 0
    assert "built by" not in warm("stats", single).stdout  # one toolchain: no such column


def test_devices_names_a_cuda_home_that_holds_no_nvcc(warm: Warm, tmp_path: Path) -> None:
    """README, CUDA compilers: nvcc is looked for in CUDA_HOME/CUDA_PATH, then PATH..., and
    `warm devices` names the one picked and the others it passed over. A CUDA_HOME set to a
    folder with no bin/nvcc (a typo, another machine's path) was passed over unsaid: the line
    read `found by PATH` as if CUDA_HOME were unset. Now it says CUDA_HOME names no nvcc."""
    nvcc_or_skip()
    elsewhere = tmp_path / "cuda-12.8"
    elsewhere.mkdir()
    done = warm.with_env(CUDA_HOME=str(elsewhere))("devices", "--compiler", "nvcc")
    assert done.returncode == 0, done.stderr
    line = next(x for x in done.stdout.splitlines() if x.startswith("compiler: cuda:"))
    assert f"CUDA_HOME={elsewhere} holds no bin/nvcc" in line
    plain = warm("devices", "--compiler", "nvcc").stdout
    assert "holds no bin/nvcc" not in plain


PYCUDA_SCRIPT = '''
import numpy as np
import pycuda.autoinit
import pycuda.driver as drv
from pycuda.compiler import SourceModule

MOD = SourceModule("""
__global__ void multiply_them(float *dest, float *a, float *b)
{
  const int i = threadIdx.x;
  dest[i] = a[i] * b[i];
}
""")

def workload(rt):
    a = np.ones(64, dtype=np.float32); b = np.ones(64, dtype=np.float32)
    dest = np.zeros_like(a)
    MOD.get_function("multiply_them")(drv.Out(dest), drv.In(a), drv.In(b), block=(64, 1, 1),
                                      grid=(1, 1))
'''


def test_a_refused_read_names_the_flag_that_lets_the_run_go_on(warm: Warm, tmp_path: Path) -> None:
    """README's first GPU-less pre-build of a PyCUDA script (`drv.Out`, as its own example)
    ends on `DiscardedReadError: read of drv.Out(...) under CompileOnly: ... meaningless`,
    which said nothing of `--allow-discarded-reads`, the flag README's example passes; the
    note that names it is dropped where the error ends the run. Now the error names it."""
    nvrtc_release_or_skip()
    (tmp_path / "app.py").write_text(PYCUDA_SCRIPT)
    done = warm("run", tmp_path / "app.py", "--pycuda", "--arch", "sm_90", "-b", tmp_path / "b")
    assert done.returncode == 2
    line = done.stderr.strip()
    assert "\n" not in line and "DiscardedReadError: read of drv.Out(float32[64])" in line
    assert "--allow-discarded-reads" in line


def test_no_gpu_hint_of_warm_verify_names_its_arch_too(warm: Warm, tmp_path: Path) -> None:
    """`warm verify B --workload app.py` of a CUDA workload on a machine with no GPU said
    `to compile without a GPU, give `warm run` the architecture: --arch sm_90`: the command
    the user ran, which takes --arch too for its replay, was not the one named."""
    (tmp_path / "app.py").write_text(CHANGED_IMPORTS)
    nvrtc_release_or_skip()
    bundle = tmp_path / "b.warm"
    assert warm("run", tmp_path / "app.py", "--arch", "sm_90", "-q", "-b", bundle).returncode == 0
    done = warm("verify", bundle, "--workload", tmp_path / "app.py")
    if "no CUDA device found" not in done.stderr:
        pytest.skip("a CUDA device is here")
    assert done.returncode == 2
    assert "warm verify --workload" in done.stderr and "--arch sm_90" in done.stderr
