"""An ML engineer's own CUDA kernels (CuPy RawModule, torch load_inline, PyCUDA) ported to
warm from the README, pre-built for a named architecture on a CI machine with no GPU
(round 31): real NVRTC and nvcc, the real CLI (each command a process of its own, forked
from one that imported the CLI once: `tests/forked_cli.py`).

Each kernel here compiles as it is with plain nvcc; warm broke some of them: a macro
named on the command line (`-DN=1024`, as CuPy's `options=` and PyCUDA's `-D` with a
header pass it) or by a header (`#define T float`) reached the templates of warm's
signature probe (`template <int N, ...>`), failing the kernel with letters said not to
match parameters that did; a kernel calling its own helper through the global scope
(`::twice(v)`) failed inside the namespace warm closes a shared kernel in.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Warm, nvcc_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.cuda.nvrtc import find_nvrtc

if find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
    pytest.skip("NVRTC not installed (cuda-bindings, nvidia-cuda-nvrtc)", allow_module_level=True)

COMPILERS = ["nvrtc", "nvcc"]


def _run(warm: Warm, tmp_path: Path, workload: str, compiler: str, *extra: str):
    """`warm run` of `workload` for sm_90 by `compiler` into tmp_path/b.warm."""
    if compiler == "nvcc":
        nvcc_or_skip()
    path = tmp_path / "w.py"
    path.write_text(workload)
    bundle = tmp_path / "b.warm"
    args = ("run", path, "--arch", "sm_90", "--compiler", compiler, "-b", bundle, "-q")
    return warm(*args, *extra), bundle


MACROS = r'''
import os
from warmcli import Kernel
DEVICE = "cuda"
HERE = os.path.dirname(os.path.abspath(__file__))
FILL = """
extern "C" __global__ void fill(float *y, float v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < N) y[i] = v;
}
"""
FILL_T = """
#include "params.h"
extern "C" __global__ void fill_t(T *y, T v) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < M) y[i] = v;
}
"""
A = Kernel(FILL, "fill", "Pf", language="cuda", options=("-DN=1024", "-DR=2"))
B = Kernel(FILL_T, "fill_t", "Pf", language="cuda", options=(f"-I{HERE}",))
def workload(rt):
    y = rt.buffer(1024)
    rt.launch(A, y, 1.0, grid=4, block=256)
    rt.launch(B, y, 1.0, grid=4, block=256)
'''


@pytest.mark.parametrize("compiler", COMPILERS)
def test_macros_named_like_template_parameters_leave_the_signature_probe_alone(
    warm: Warm, tmp_path: Path, compiler: str
) -> None:
    """`-DN=1024` on the command line and `#define T float` in a header: it read `kernel
    fill: parameter letters 'Pf' do not match fill(float *y, float v): argument 1: letter
    'P' (pointer: a buffer), declared 'float *y'` over warm's own `template <int 1024,
    class... A>`."""
    (tmp_path / "params.h").write_text("#pragma once\n#define T float\n#define M 1024\n")
    proc, _ = _run(warm, tmp_path, MACROS, compiler)
    assert proc.returncode == 0, proc.stderr
    assert "stored 4 new kernel(s)" in proc.stdout


GLOBAL_SCOPE = r'''
from warmcli import Kernel
DEVICE = "cuda"
QUAL = """
__device__ float twice(float v) { return 2.0f * v; }
namespace ops { __device__ float thrice(float v) { return 3.0f * v; } }
extern "C" __global__ void qual(float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = ::twice(y[i]) + ::ops::thrice(y[i]);
}
"""
OTHER = """
extern "C" __global__ void other(float *y, int n) { if (threadIdx.x < n) y[threadIdx.x] = 1.0f; }
"""
K1 = Kernel(QUAL, "qual", "Pi", language="cuda")
K2 = Kernel(OTHER, "other", "Pi", language="cuda")
def workload(rt):
    y = rt.buffer(64)
    rt.launch(K1, y, 64, grid=1, block=64)
    rt.launch(K2, y, 64, grid=1, block=64)
'''


@pytest.mark.parametrize("compiler", COMPILERS)
def test_a_helper_called_through_the_global_scope_compiles_as_alone(
    warm: Warm, tmp_path: Path, compiler: str
) -> None:
    """`::twice(v)` names the source's own helper: it read `error: the global scope has no
    "twice"`, the kernel wrapped in warm's namespace even in a group of its own."""
    proc, _ = _run(warm, tmp_path, GLOBAL_SCOPE, compiler)
    assert proc.returncode == 0, proc.stderr
    assert "stored 4 new kernel(s)" in proc.stdout


TEMPLATE_ENTRY = r'''
from warmcli import Kernel
DEVICE = "cuda"
SRC = """
template <typename T> __global__ void tk(T *y, int n) { if (threadIdx.x < n) y[0] = T(0); }
template __global__ void tk<float>(float *, int);
"""
K = Kernel(SRC, "tk", "Pi", language="cuda")
def workload(rt):
    rt.launch(K, rt.buffer(64), 64, grid=1, block=64)
'''


@pytest.mark.parametrize("compiler", COMPILERS)
def test_a_template_entry_is_named_as_one_not_as_letters_that_differ(
    warm: Warm, tmp_path: Path, compiler: str
) -> None:
    """A CuPy user's `name_expressions=["tk<float>"]` kernel: it read `parameter letters
    'Pi' do not match tk(T *y, int n): argument 1: letter 'P' (pointer: a buffer),
    declared 'T *y'`, which they do."""
    proc, _ = _run(warm, tmp_path, TEMPLATE_ENTRY, compiler)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "do not match" not in proc.stderr
    assert "kernel tk: its entry 'tk' is a function template" in proc.stderr
    assert 'extern "C" __global__' in proc.stderr
    assert not (tmp_path / "b.warm").exists()


HOST_HEADER = r'''
from warmcli import Kernel
DEVICE = "cuda"
SRC = """
#include <cstdint>
extern "C" __global__ void clampk(float *y, int64_t n) {
    int64_t i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fminf(y[i], 1.0f);
}
"""
K = Kernel(SRC, "clampk", "Pq", language="cuda")
def workload(rt):
    rt.launch(K, rt.buffer(64), 64, grid=1, block=64)
'''


def test_a_host_header_nvrtc_lacks_is_said_so_not_blamed_on_the_working_folder(
    warm: Warm, tmp_path: Path
) -> None:
    """`#include <cstdint>` (a torch extension's habit) builds with nvcc; NVRTC, which has
    no host compiler's headers, failed it with the hint `NVRTC reads no header from the
    working folder: name it with -I`, a folder that holds no such header."""
    proc, _ = _run(warm, tmp_path, HOST_HEADER, "nvrtc")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert 'cannot open source file "cstdint"' in proc.stderr
    assert "working folder" not in proc.stderr
    assert "--compiler nvcc" in proc.stderr and "<cuda/std/" in proc.stderr
    proc, _ = _run(warm, tmp_path, HOST_HEADER, "nvcc")
    assert proc.returncode == 0, proc.stderr


def test_a_quoted_header_nvrtc_does_not_find_still_names_the_folder_option(
    warm: Warm, tmp_path: Path
) -> None:
    (tmp_path / "mine.cuh").write_text("#define ONE 1.0f\n")
    workload = HOST_HEADER.replace("<cstdint>", '"mine.cuh"').replace("int64_t", "int")
    proc, _ = _run(warm, tmp_path, workload.replace('"Pq"', '"Pi"'), "nvrtc")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # beside the workload, not in the working folder (round 48: that hint is for the latter)
    assert "the -I folders only (never the working folder" in proc.stderr
    assert "name its folder with -I" in proc.stderr


C_LINKAGE_HELPER = r'''
from warmcli import Kernel
DEVICE = "cuda"
SRC = """
extern "C" {
__device__ float act(float x) { return x > 0.f ? x : x * ALPHA; }
__global__ void leaky(float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = act(y[i]);
}
}
"""
KS = [Kernel(SRC, "leaky", "Pi", language="cuda", defines={"ALPHA": f"{a}.0f"}) for a in range(4)]
def workload(rt):
    y = rt.buffer(1024)
    for k in KS:
        rt.launch(k, y, 1024, grid=4, block=256)
'''


def _compile_pass(proc) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["passes"][1]["compilation"]


def test_variants_of_a_helper_of_c_linkage_are_built_apart_not_bisected(
    warm: Warm, tmp_path: Path
) -> None:
    """CuPy's `extern "C" { ... }` around a whole source gives its helper C linkage: in one
    unit the variants' `act` were one function defined four times, so the group failed
    and was bisected down to single kernels (7 programs for 4 kernels, 11 for 6)."""
    proc, _ = _run(warm, tmp_path, C_LINKAGE_HELPER, "nvrtc", "--jobs", "1", "--json")
    compiled = _compile_pass(proc)
    assert (compiled["compiled"], compiled["failed"], compiled["compiler_processes"]) == (4, 0, 4)


PYCUDA_MODULE = r'''
import numpy as np
import pycuda.autoinit
import pycuda.driver as drv
from pycuda.compiler import SourceModule
mod = SourceModule("""
__device__ float twice(float v) { return 2.0f * v; }
__global__ void k_one(float *y, int n) { if (threadIdx.x < n) y[threadIdx.x] = twice(y[0]); }
__global__ void k_two(float *y, int n) { if (threadIdx.x < n) y[threadIdx.x] = twice(1.0f); }
""")
def main():
    y = drv.mem_alloc(4 * 256)
    mod.get_function("k_one")(y, np.int32(256), block=(256, 1, 1), grid=(1, 1))
    mod.get_function("k_two")(y, np.int32(256), block=(256, 1, 1), grid=(1, 1))
'''


def test_a_pycuda_modules_kernels_with_a_helper_at_column_0_are_not_bisected(
    warm: Warm, tmp_path: Path
) -> None:
    """The README's module shape: PyCUDA's `extern "C"` wrap gives `twice` C linkage in
    each kernel's copy; warm renames only indented names, so the shared unit clashed."""
    proc, _ = _run(warm, tmp_path, PYCUDA_MODULE, "nvrtc", "--pycuda", "--jobs", "1", "--json")
    compiled = _compile_pass(proc)
    assert (compiled["compiled"], compiled["failed"], compiled["compiler_processes"]) == (2, 0, 2)


NVCC_HABITS = r'''
import json, os
from warmcli import Kernel
DEVICE = "cuda"
SRC = """
extern "C" __global__ void clampk(float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = fminf(y[i], INFINITY) + (float)M_PI;
}
"""
K = Kernel(SRC, "clampk", "Pi", language="cuda", options=OPTIONS)
def workload(rt):
    rt.launch(K, rt.buffer(64), 64, grid=1, block=64)
'''


@pytest.mark.parametrize(
    ("options", "shown"),
    [
        ("()", 'identifier "INFINITY" is undefined'),
        ('("-O3",)', "unrecognized option -O3"),
    ],
)
def test_what_only_nvcc_takes_fails_under_nvrtc_naming_compiler_nvcc(
    warm: Warm, tmp_path: Path, options: str, shown: str
) -> None:
    """A torch/PyCUDA kernel built by nvcc until now, run by warm's default NVRTC: the log
    said what NVRTC lacks, and nothing said that nvcc, installed beside it, builds it."""
    proc, _ = _run(warm, tmp_path, NVCC_HABITS.replace("OPTIONS", options), "nvrtc")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert shown in proc.stderr and "--compiler nvcc" in proc.stderr
    assert "working folder" not in proc.stderr


HOPPER_ONLY = r'''
from warmcli import Kernel
DEVICE = "cuda"
SRC = """
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#error "hopper only"
#endif
extern "C" __global__ void hop(float *y) { y[0] = 1.0f; }
"""
K = Kernel(SRC, "hop", "P", language="cuda")
def workload(rt):
    rt.launch(K, rt.buffer(4), grid=1, block=1)
'''


def test_a_kernel_that_fails_for_one_of_two_archs_names_that_arch(
    warm: Warm, tmp_path: Path
) -> None:
    """`--arch sm_80 --arch sm_90`: it read `kernel hop failed to compile:`, which of the
    two builds failed left to the log's `#error`."""
    proc, _ = _run(warm, tmp_path, HOPPER_ONLY, "nvrtc", "--arch", "sm_80")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # (sm_90's cubin and PTX, stored before it, are said kept before the log's colon)
    assert "kernel hop failed to compile for sm_80; 2 kernel(s) and 0 tune(s) stored in" in (
        proc.stderr
    )
    assert "before it are kept:\n" in proc.stderr
    assert '#error directive: "hopper only"' in proc.stderr


PYCUDA_KERNELS_ONLY = (
    PYCUDA_MODULE.replace(
        "__device__ float twice(float v) { return 2.0f * v; }", "__constant__ float coef[2];"
    )
    .replace("twice(y[0])", "coef[0]")
    .replace("twice(1.0f)", "coef[1]")
)


def test_a_pycuda_modules_kernels_at_column_0_still_share_a_unit(
    warm: Warm, tmp_path: Path
) -> None:
    """Each kernel's copy of the module holds the other kernels, of C linkage: no two copies
    define the same one (each copy renames its own), so they share one program."""
    workload = PYCUDA_KERNELS_ONLY
    proc, _ = _run(warm, tmp_path, workload, "nvrtc", "--pycuda", "--jobs", "1", "--json")
    compiled = _compile_pass(proc)
    assert (compiled["compiled"], compiled["failed"], compiled["compiler_processes"]) == (2, 0, 1)
