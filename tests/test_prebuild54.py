"""A CI pre-build on a machine with no GPU, then production on the GPU it names (stop 54).

What the GPU process looks up is decided by keys this machine computes: a `FakeH100`
stands for the `CudaDevice` of an H100 (the arch, name and driver it reports) in the pure
key logic of a production `Runtime` over the pre-built bundle; the compiles are the real
NVRTC's and nvcc's. An arch-specific pre-build (`--arch sm_90a`) is looked up by no GPU
(an H100 keys `sm_90`, its compute capability's): `warm run` and `warm check` say so. The
check `scripts/gpu-check` makes of a carried pre-build on the GPU fails on a kernel it
cannot serve (a `warm run` there would compile it, hiding the miss).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Warm

from warmcli import Kernel, ProcessMode, ProcessModeOverride, Runtime
from warmcli.backends.base import DeviceFingerprint
from warmcli.backends.cuda.arch import ArchDevice
from warmcli.backends.cuda.nvrtc import find_nvrtc
from warmcli.bundle.store import Bundle

if find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
    pytest.skip("NVRTC not installed (cuda-bindings, nvidia-cuda-nvrtc)", allow_module_level=True)


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once."""
    return forked(warm)


class FakeH100(ArchDevice):
    """Fake, for pure key logic only: what a `CudaDevice` of an H100 computes its keys and
    serving from (arch `sm_90` from compute capability (9, 0), its name, a CUDA 13.0
    driver), with this machine's real compiler; nothing runs on it."""

    def __init__(self) -> None:
        super().__init__("sm_90")
        self.id = "cuda:0"

    @property
    def fingerprint(self) -> DeviceFingerprint:
        return DeviceFingerprint("cuda", "NVIDIA H100 80GB HBM3", "sm_90", "13.0")


WORKLOAD = r'''
from warmcli import Kernel
DEVICE = "cuda"
SRC = """
template <typename T> __device__ T twice(T v) { return v + v; }
extern "C" __global__ void scale(float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = twice(y[i]) * FACTOR;
}
extern "C" __global__ void fill(float *y, int n) { if (threadIdx.x < n) y[threadIdx.x] = FACTOR; }
"""
KERNELS = [Kernel(SRC, e, "Pi", language="cuda", defines={"FACTOR": 3}) for e in ("scale", "fill")]
def workload(rt):
    y = rt.buffer(64)
    for k in KERNELS:
        rt.launch(k, y, 64, grid=1, block=64)
'''


def _served_on_h100(bundle: Path, kernels: list[Kernel]) -> tuple[int, int, int]:
    """(compiled, loaded, ptx_jit) of a production process on an H100 over `bundle`."""
    with Bundle.open(bundle) as opened, ProcessModeOverride(ProcessMode.EXECUTE) as seen:
        rt = Runtime(FakeH100(), opened)
        for kernel in kernels:
            rt.kernels.get(kernel)
    counts = seen.reader().compilation
    return counts.compiled, counts.loaded, counts.ptx_jit


def test_an_arch_specific_prebuild_says_no_gpu_looks_it_up(
    warm: Warm, workload_file: Any, tmp_path: Path
) -> None:
    """`--arch sm_90a` built cubins an H100 never looks up (it keys `sm_90`): it compiled
    every kernel over such a bundle while `warm run`, `warm check --arch sm_90a` and `warm
    verify --arch sm_90a` called it complete and servable; they now say so, naming the arch
    to pre-build, and an
    `--arch sm_90` pre-build is served whole."""
    path = workload_file(WORKLOAD)
    import runpy

    kernels = runpy.run_path(str(path))["KERNELS"]
    for arch in ("sm_90a", "sm_90"):
        bundle = tmp_path / f"{arch}.warm"
        run = warm("run", path, "--arch", arch, "-b", bundle, "-q")
        assert run.returncode == 0, run.stderr
        said = f"no GPU looks up {arch} builds" in run.stdout
        served = _served_on_h100(bundle, kernels)
        if arch == "sm_90":
            assert served == (0, 2, 0) and not said, (served, run.stdout)
            continue
        assert served[1] == 0, served  # (compiled here: its PTX is ISA 9.5, the driver 13.0)
        assert said and "pre-build --arch sm_90 for it" in run.stdout, run.stdout
        check = warm("check", bundle, "--arch", arch)
        assert check.returncode == 0 and f"{arch}: no GPU looks up {arch}" in check.stdout
        replay = warm("verify", bundle, "--workload", path, "--arch", arch, "-q")
        assert replay.returncode == 0 and f"warning: {arch}: no GPU looks up" in replay.stderr
        from warmcli.backends.cuda.arch import no_gpu_keys
        from warmcli.backends.machine import compiler_info  # `warm run --json`'s compilers

        assert compiler_info(ArchDevice(arch))["unserved"] == no_gpu_keys(arch)
    family = "no GPU looks up sm_100f builds: a GPU of compute capability 10.0 keys its kernels"
    assert no_gpu_keys("sm_100f").startswith(f"{family} for sm_100 ")
    assert no_gpu_keys("sm_90") == no_gpu_keys("x86_64") == ""


def _pending_only() -> str:
    """`scripts/gpu-check`'s PENDING_ONLY: the check of a carried pre-build on the GPU."""
    found = re.search(r"^PENDING_ONLY='(.*?)'$", (ROOT / "scripts" / "gpu-check").read_text(),
                      re.S | re.M)  # fmt: skip
    assert found is not None, "gpu-check judges a carried pre-build's `warm check --json`"
    return found.group(1)


def test_gpu_checks_look_at_a_prebuild_fails_on_a_kernel_it_cannot_serve(
    warm: Warm, tmp_path: Path
) -> None:
    """gpu-check printed `warm check` of a carried pre-build and went on to `warm run` over
    it, which compiles what the GPU cannot serve: a pre-build whose every kernel missed
    passed. Its judge, run here over real `warm check --json` of an `--arch sm_90` bundle:
    pending tunes pass; kernels a CUDA 12.8 driver cannot load, or nothing checked, fail.
    The pre-build's own verify line names the tunes it leaves pending."""
    from conftest import EXAMPLES

    bundle = tmp_path / "pre.warm"
    run = warm("run", EXAMPLES / "saxpy_cuda.py", "--arch", "sm_90", "-b", bundle, "-q")
    # its verify line said `the bundle is complete`, and no more, of 6 tunes left pending
    complete = "the bundle is complete, but for its 6 tune(s) pending: no GPU here measures them"
    assert run.returncode == 0 and complete in run.stdout, run.stdout
    judge = _pending_only()
    verdicts = []
    for extra in ((), ("--driver", "12.8"), None):
        args = () if extra is None else ("--arch", "sm_90", *extra)
        doc = warm("check", bundle, *args, "--json").stdout
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        judged = subprocess.run([sys.executable, "-c", judge], input=doc, capture_output=True,
                                text=True, env=env)  # fmt: skip
        verdicts.append(judged.returncode)
        if extra == ("--driver", "12.8"):
            assert "not servable: kernel" in judged.stdout, judged.stdout
    assert verdicts == [0, 1, 1]


def test_check_with_no_gpu_names_the_archs_a_prebuild_is_for(
    warm: Warm, workload_file: Any, tmp_path: Path
) -> None:
    """`warm check` of a pre-build on the GPU-less CI machine said `nothing could be
    checked here` and `--arch sm_XX checks them`, never which GPU the bundle is for: it
    names its cubins' archs (the first 8), and `--json` has them as `not_checked_archs`."""
    bundle = tmp_path / "two.warm"
    run = ("run", workload_file(WORKLOAD), "--arch", "sm_80", "--arch", "sm_90", "-b", bundle)
    assert warm(*run, "-q").returncode == 0
    check = warm("check", bundle)
    line = check.stdout.strip().splitlines()[-1]
    assert check.returncode == 0 and line.startswith("not checked: 2 cuda kernel(s)"), line
    assert line.endswith(
        ": its cubins are for sm_80, sm_90 (--arch sm_80 --arch sm_90 checks them)"
    )
    doc = warm.json("check", bundle)
    assert doc["servable"] is None and sorted(doc["not_checked_archs"]) == ["sm_80", "sm_90"]


def test_an_nvidia_driver_version_given_as_driver_is_refused(warm: Warm, tmp_path: Path) -> None:
    """`--driver 550.54` (nvidia-smi's `Driver Version`, cut to X.Y, where a CUDA 12.4
    fleet says `CUDA Version: 12.4`) was taken as CUDA release 550.54: every CUDA 13 build
    passed the check, none of which that fleet loads. One line, exit 2, naming the fix."""
    proc = warm("check", tmp_path / "none.warm", "--arch", "sm_90", "--driver", "550.54")
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1
    assert "not a CUDA release" in proc.stderr and "'CUDA Version'" in proc.stderr
