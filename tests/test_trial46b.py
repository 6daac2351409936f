"""Trial 46b: a CUDA developer with no GPU pre-builds a PyCUDA project for sm_80 and sm_90 in
CI, following the README's "PyCUDA code", "CUDA compilers" and "Explaining misses" alone.
Real CLI in subprocesses, real NVRTC (the venv's) and real bundles; nothing faked."""

from __future__ import annotations

from pathlib import Path

from conftest import Warm, nvrtc_release_or_skip

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
