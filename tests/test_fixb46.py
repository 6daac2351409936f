"""Fix b46: `warm stats` imports no numpy (nor `warmcli.kernel`) where its table names each
build's compiler: `kernel_toolchains` read a CUDA release through `warmcli.backends.serving`,
imported at the top of `kernel_columns`, which imports `warmcli.kernel` and so numpy (~40 ms
of the command; an out-of-memory `warm stats` ended in numpy's own ImportError traceback).
Real CLI in subprocesses, real NVRTC and nvcc, real bundles."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ROOT, Warm, nvcc_or_skip, nvrtc_release_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

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


def test_stats_naming_two_compilers_imports_no_numpy(warm: Warm, tmp_path: Path) -> None:
    """A kernel built by NVRTC and by nvcc (README, CUDA compilers): `warm stats` shows the
    `built by` column, each build's CUDA release read without importing numpy."""
    nvrtc = nvrtc_release_or_skip()
    nvcc_or_skip()
    (tmp_path / "k.py").write_text(KERNEL_API)
    bundle = tmp_path / "b.warm"
    for compiler in ("nvrtc", "nvcc"):
        done = warm("run", tmp_path / "k.py", "--arch", "sm_90", "--no-ptx", "--compiler",
                    compiler, "-q", "-b", bundle)  # fmt: skip
        assert done.returncode == 0, done.stderr
    done = subprocess.run(  # every module imported, said on stderr as it is
        [sys.executable, "-X", "importtime", "-m", "warmcli", "stats", str(bundle)],
        capture_output=True, text=True, env=warm.env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "built by" in done.stdout and f"nvrtc {nvrtc[0]}.{nvrtc[1]}" in done.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "warmcli.cli.render.kernel_columns" in imported, done.stderr
    assert not imported & {"numpy", "warmcli.kernel", "warmcli.backends.serving"}, done.stderr
