"""Review of the CUDA pre-build trial: a group whose default `compute_90` PTX program fails
(one kernel builds for sm_90a only) keeps the PTX of every other kernel in it, whatever
`--jobs` put in one group. Real NVRTC and nvcc, compile-only, through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.cuda.nvrtc import find_nvrtc

if find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
    pytest.skip("NVRTC not installed (cuda-bindings, nvidia-cuda-nvrtc)", allow_module_level=True)

MIXED = r'''
from warmcli import Kernel
DEVICE = "cuda"
HOPPER = """
extern "C" __global__ void hopper_only(float *y) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error this kernel needs sm_90a
#endif
    y[threadIdx.x] = 1.0f;
}
"""
PLAIN = """
extern "C" __global__ void plain(float *y) { y[threadIdx.x] = 2.0f; }
"""
def workload(rt):
    y = rt.buffer(128)
    rt.launch(Kernel(PLAIN, "plain", "P", language="cuda"), y, grid=1, block=128)
    rt.launch(Kernel(HOPPER, "hopper_only", "P", language="cuda"), y, grid=1, block=128)
'''


@pytest.mark.parametrize("compiler", ["nvrtc", "nvcc"])
def test_an_sm90a_only_kernel_does_not_cost_its_group_mates_their_ptx(
    warm: Warm, workload_file, tmp_path: Path, compiler: str
) -> None:
    """With one compiler process (`-j 1`) both kernels were one group: its compute_90 PTX
    program failed on the sm_90a-only kernel and the plain kernel was stored without its
    PTX, which `-j 2` (a group each) kept: what a bundle holds depended on `--jobs`."""
    workload = workload_file(MIXED)
    held = []
    for jobs in ("1", "2"):
        bundle = tmp_path / f"j{jobs}.warm"
        run = ("run", workload, "--arch", "sm_90a", "--compiler", compiler, "-j", jobs)
        proc = warm(*run, "-b", bundle, "-q")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        held.append(sorted((k["label"], k["arch"]) for k in warm.json("stats", bundle)["kernels"]))
    want = [("hopper_only", "sm_90a"), ("plain", "compute_90"), ("plain", "sm_90a")]
    assert held == [want, want]
