"""A CI engineer's GPU-less pre-build for named architectures, for real (NVRTC and nvcc).

Workloads warm's other tests do not write (templates behind extern "C" wrappers,
`__device__` helpers, `__constant__` memory, half and bfloat16, cooperative groups,
launch bounds, a tune over block sizes), checked as production would see them: every
key a CUDA device of the built architecture computes is in the bundle, every cubin is
for its architecture, every PTX is one a newer GPU can JIT; an architecture that is no
GPU's is one line before anything compiles; nvcc and NVRTC bundles merge and
`warm check --arch` reads the merge. Every run goes through the CLI in a subprocess.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm

from warmcli.backends.cuda.nvrtc import find_nvrtc

if find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
    pytest.skip("NVRTC not installed (cuda-bindings, nvidia-cuda-nvrtc)", allow_module_level=True)

SMALL = r'''
from warmcli import Kernel
DEVICE = "cuda"
SRC = """
__device__ float twice(float v) { return 2.0f * v; }
extern "C" __global__ void scale(float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = twice(y[i]) * FACTOR;
}
"""
K = Kernel(SRC, "scale", "Pi", language="cuda", defines={"FACTOR": 3})
def workload(rt):
    y = rt.buffer(64)
    rt.launch(K, y, 64, grid=1, block=64)
'''


@pytest.mark.parametrize(
    ("arch", "why"),
    [
        ("sm_090", "sm_90"),  # a leading zero: no compiler takes it
        ("sm_80a", "sm_90"),  # arch-specific (a) targets start at sm_90
        ("sm_89a", "sm_90"),
        ("sm_90f", "sm_100"),  # family-specific (f) targets start at sm_100
    ],
)
@pytest.mark.parametrize("compiler", ["nvrtc", "nvcc"])
def test_an_arch_no_gpu_has_is_one_line_before_anything_compiles(
    warm: Warm, workload_file, tmp_path: Path, arch: str, why: str, compiler: str
) -> None:
    """Each compiler refused these only at the kernel's compile, blamed on the kernel
    (`kernel scale[FACTOR=3] failed to compile: ... catastrophic error ...`)."""
    bundle = tmp_path / "typo.warm"
    proc = warm("run", workload_file(SMALL), "--arch", arch, "--compiler", compiler, "-b", bundle)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and arch in lines[0] and why in lines[0], proc.stderr
    assert "failed to compile" not in proc.stderr and not bundle.exists()
    check = warm("check", tmp_path / "none.warm", "--arch", arch, "--compiler", compiler)
    assert check.returncode == 2 and len(check.stderr.strip().splitlines()) == 1, check.stderr


@pytest.mark.parametrize("compiler", ["nvrtc", "nvcc"])
def test_a_ptx_arch_with_a_leading_zero_is_refused_before_the_first_pass(
    warm: Warm, workload_file, tmp_path: Path, compiler: str
) -> None:
    bundle = tmp_path / "ptx.warm"
    run = ("run", workload_file(SMALL), "--arch", "sm_90", "--compiler", compiler, "-b", bundle)
    proc = warm(*run, "--ptx", "compute_090")
    assert proc.returncode == 2 and "compute_XX" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not bundle.exists()


HOPPER_ONLY = r'''
from warmcli import Kernel
DEVICE = "cuda"
SRC = """
extern "C" __global__ void hopper_only(float *y) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#error this kernel needs sm_90a
#endif
    y[threadIdx.x] = 1.0f;
}
"""
K = Kernel(SRC, "hopper_only", "P", language="cuda")
def workload(rt):
    rt.launch(K, rt.buffer(128), grid=1, block=128)
'''


@pytest.mark.parametrize("compiler", ["nvrtc", "nvcc"])
def test_an_sm90a_only_kernel_is_built_without_the_compute90_ptx_it_cannot_have(
    warm: Warm, workload_file, tmp_path: Path, compiler: str
) -> None:
    """The PTX kept by default beside an `sm_90a` cubin is `compute_90`'s, a program of its
    own: a kernel that builds only for sm_90a failed the whole run (exit 2, its `#error`)
    though its cubin built; the cubin is kept, without PTX, and the compile log says why."""
    bundle = tmp_path / "hopper.warm"
    run = ("run", workload_file(HOPPER_ONLY), "--arch", "sm_90a", "--compiler", compiler)
    proc = warm(*run, "-b", bundle, "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = warm.json("stats", bundle)
    assert [k["arch"] for k in doc["kernels"]] == ["sm_90a"]
    assert warm("check", bundle, "--arch", "sm_90a", "--compiler", compiler).returncode == 0
    from warmcli.bundle.store import Bundle

    with Bundle.open(bundle) as opened:
        (record,) = opened.kernels()
        assert "compute_90" in record.compile_log and "needs sm_90a" in record.compile_log
    explicit = warm(*run, "--ptx", "compute_90", "-b", tmp_path / "asked.warm")
    assert explicit.returncode == 2 and "needs sm_90a" in explicit.stderr, "asked for: a failure"
