"""A CI engineer's GPU-less pre-build for named architectures, for real (NVRTC and nvcc).

Workloads warm's other tests do not write (templates behind extern "C" wrappers,
`__device__` helpers, `__constant__` memory, half and bfloat16, cooperative groups,
launch bounds, a tune over block sizes), checked as production would see them: every
key a CUDA device of the built architecture computes is in the bundle, every cubin is
for its architecture, every PTX is one a newer GPU can JIT; an architecture that is no
GPU's is one line before anything compiles; nvcc and NVRTC bundles merge and
`warm check --arch` reads the merge. Every run goes through the CLI, each command a process
of its own (`mixed`'s started, the tests' forks of one that imported the CLI once,
`tests/forked_cli.py`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import Warm

from warmcli.backends.cuda.nvrtc import find_nvrtc


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


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


HOPPER_MIX = r'''
from warmcli import Kernel, Tunable
DEVICE = "cuda"
HALVES = """
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__constant__ float COEFF[3] = {1.0f, 0.5f, 0.25f};
__device__ __forceinline__ float poly(float x) { return COEFF[0] + x * (COEFF[1] + x * COEFF[2]); }
template <typename T, int U>
__device__ void apply(T *y, int n) {
    int i = (blockIdx.x * blockDim.x + threadIdx.x) * U;
    #pragma unroll
    for (int u = 0; u < U; u++)
        if (i + u < n) y[i + u] = T(poly(float(y[i + u])) * SCALE);
}
extern "C" __global__ void __launch_bounds__(BLOCK) apply_half(__half *y, int n) {
    apply<__half, UNROLL>(y, n);
}
extern "C" __global__ void __launch_bounds__(BLOCK) apply_bf16(__nv_bfloat16 *y, int n) {
    apply<__nv_bfloat16, UNROLL>(y, n);
}
"""
GROUPS = """
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
extern "C" __global__ void tile_sum(const float *x, float *out, int n) {
    cg::thread_block_tile<32> tile = cg::tiled_partition<32>(cg::this_thread_block());
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    for (int o = tile.size() / 2; o > 0; o /= 2) v += tile.shfl_down(v, o);
    if (tile.thread_rank() == 0) atomicAdd(out, v);
}
"""
def half(entry, block, unroll=2):
    defines = {"BLOCK": block, "UNROLL": unroll, "SCALE": 0.5, "FAST": True, "TAG": "x"}
    return Kernel(HALVES, entry, "Pi", language="cuda", defines=defines)
def launch(rt, kernel, y, n, *, stream=None):
    b, u = int(kernel.define("BLOCK")), int(kernel.define("UNROLL"))
    rt.launch(kernel, y, n, grid=(n + b * u - 1) // (b * u), block=b, stream=stream)
TUNE = Tunable("apply_half", {f"b{b}": half("apply_half", b) for b in (128, 256)}, launch)
BF16 = half("apply_bf16", 256, unroll=1)
SUM = Kernel(GROUPS, "tile_sum", "PPi", language="cuda")
def workload(rt):
    y = rt.buffer(4096, "float16")
    rt.tune(TUNE, y, 4096)
    rt.launch(BF16, rt.buffer(1000, "uint16"), 1000, grid=4, block=256)
    rt.launch(SUM, rt.buffer(1024), rt.buffer(1), 1024, grid=4, block=256)
'''


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, Path]:
    """HOPPER_MIX pre-built by NVRTC for sm_80 and sm_90 (4 kernels, each alone: they
    include headers)."""
    import json
    import os
    import subprocess
    import sys

    base = tmp_path_factory.mktemp("mixed")
    workload, bundle = base / "mix.py", base / "mix.warm"
    workload.write_text(HOPPER_MIX)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env["WARM_HOME"] = str(base / "home")
    run = ["run", str(workload), "--arch", "sm_80", "--arch", "sm_90", "--compiler", "nvrtc"]
    proc = subprocess.run(
        [sys.executable, "-m", "warmcli", *run, "-b", str(bundle), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return bundle, json.loads(proc.stdout), workload


def _reached(workload: Path) -> list:
    import runpy

    module = runpy.run_path(str(workload))
    return [*module["TUNE"].candidates.values(), module["BF16"], module["SUM"]]


def test_every_key_a_production_gpu_computes_is_a_loadable_build(mixed) -> None:
    from warmcli.backends.cuda.cubin import check_cubin, cubin_functions
    from warmcli.backends.cuda.nvrtc import NvrtcCompiler
    from warmcli.backends.cuda.ptx import check_ptx, cuda_for_isa, ptx_header
    from warmcli.bundle.store import Bundle
    from warmcli.kernel import kernel_key

    bundle, doc, workload = mixed
    assert doc["verified"] is True and doc["stored"]["kernels"] == 12, doc["stored"]
    identity = NvrtcCompiler(ptx="auto").toolchain.identity
    release = identity.split("release ")[1].split(",")[0]
    with Bundle.open(bundle) as opened:
        for kernel in _reached(workload):
            for arch in ("sm_80", "sm_90", "compute_90"):
                record = opened.kernel(kernel_key(kernel, arch, identity))
                assert record is not None, f"{kernel.label} for {arch} missing"
                blob = opened.blob(record.sha256)
                if arch.startswith("compute"):
                    isa = ptx_header(blob)[0]
                    assert cuda_for_isa(isa) <= tuple(map(int, release.split(".")))
                    check_ptx(blob, "sm_100", release)  # a newer GPU of this CUDA JITs it
                    assert record.symbol.encode() in blob
                else:
                    check_cubin(blob, arch)
                    assert record.symbol in cubin_functions(blob)
        tunes = opened.tunes()
        assert sorted(t.status for t in tunes) == ["pending", "pending"]
        assert {len(t.candidates) for t in tunes} == {2}


def test_gpu_less_verify_for_a_newer_arch_agrees_with_check_on_ptx(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """An sm_80 pre-build with its compute_80 PTX, replayed for sm_90 without a GPU: `warm
    check --arch sm_90` counts it served by PTX JIT (as a GPU's verify, under Execute,
    serves it), but `warm verify --workload --arch sm_90` queued it as missing (exit 1)."""
    workload = workload_file(SMALL)
    with_ptx, cubins = tmp_path / "ptx.warm", tmp_path / "cubins.warm"
    for bundle, extra in ((with_ptx, ()), (cubins, ("--no-ptx",))):
        proc = warm("run", workload, "--arch", "sm_80", "-b", bundle, "-q", *extra)
        assert proc.returncode == 0, proc.stderr
    assert warm("check", with_ptx, "--arch", "sm_90").returncode == 0
    doc = warm.json("verify", with_ptx, "--workload", workload, "--arch", "sm_90")
    assert doc["verified"] is True and doc["missing"] == [], doc["missing"]
    compiled = doc["compilation"]
    assert (compiled["queued"], compiled["loaded"], compiled["ptx_jit"]) == (0, 1, 1)
    for arch in ("sm_90", "sm_75"):  # no PTX; PTX for a newer GPU than this one
        bundle = cubins if arch == "sm_90" else with_ptx
        assert warm("check", bundle, "--arch", arch).returncode == 1
        replay = warm("verify", bundle, "--workload", workload, "--arch", arch)
        assert replay.returncode == 1 and "1 kernel(s) queued, not in the bundle" in replay.stdout


INF = r'''
from warmcli import Kernel
DEVICE = "cuda"
SRC = """
extern "C" __global__ void clampinf(float *y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && y[i] > LIMIT) y[i] = INFINITY;
}
"""
K = Kernel(SRC, "clampinf", "Pi", language="cuda", defines={"LIMIT": 1e30})
def workload(rt):
    rt.launch(K, rt.buffer(64), 64, grid=1, block=64)
'''


def test_nvcc_and_nvrtc_bundles_merge_and_serve_each_other(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """A kernel only nvcc builds (INFINITY comes from nvcc's host headers) pre-built by
    nvcc, another by NVRTC, merged: `warm check` and `warm verify --workload` on a machine
    whose compiler is NVRTC serve both, and a production lookup compiles nothing."""
    from conftest import nvcc_or_skip

    nvcc_or_skip()
    inf, small = workload_file(INF, "inf.py"), workload_file(SMALL, "small.py")
    by_nvcc, by_nvrtc, merged = (tmp_path / f"{n}.warm" for n in ("nvcc", "nvrtc", "merged"))
    refused = warm("run", inf, "--arch", "sm_90", "--compiler", "nvrtc", "-b", by_nvrtc)
    assert refused.returncode == 2 and 'identifier "INFINITY" is undefined' in refused.stderr
    assert "Traceback" not in refused.stderr and not by_nvrtc.exists()
    built = warm("run", inf, "--arch", "sm_90", "--compiler", "nvcc", "-b", by_nvcc, "-q")
    assert built.returncode == 0, built.stderr
    built = warm("run", small, "--arch", "sm_90", "--compiler", "nvrtc", "-b", by_nvrtc, "-q")
    assert built.returncode == 0, built.stderr
    assert warm("merge", by_nvcc, by_nvrtc, "-o", merged).returncode == 0
    kernels = warm.json("stats", merged)["kernels"]
    assert sorted((k["entry"], k["arch"]) for k in kernels) == [
        ("clampinf", "compute_90"),
        ("clampinf", "sm_90"),
        ("scale", "compute_90"),
        ("scale", "sm_90"),
    ]
    for compiler in ("nvrtc", "nvcc"):
        doc = warm.json("check", merged, "--arch", "sm_90", "--compiler", compiler)
        assert doc["servable"] is True and doc["kernels"] == 2 and doc["ptx_jit"] == []
        for workload in (inf, small):
            replay = warm("verify", merged, "--workload", workload, "--arch", "sm_90")
            assert replay.returncode == 0, replay.stdout
    newer = warm.json("check", merged, "--arch", "sm_100")
    assert newer["servable"] is True and len(newer["ptx_jit"]) == 2
    older = warm("check", merged, "--arch", "sm_80", "--json")
    assert older.returncode == 1 and '"unservable_count": 2' in older.stdout

    import runpy

    from warmcli import ProcessMode, ProcessModeOverride, Runtime
    from warmcli.backends.cuda.arch import ArchDevice
    from warmcli.bundle.store import Bundle

    with Bundle.open(merged) as bundle, ProcessModeOverride(ProcessMode.EXECUTE) as seen:
        rt = Runtime(ArchDevice("sm_90", compiler="nvrtc"), bundle)  # as a GPU's would
        for path in (inf, small):
            rt.kernels.get(runpy.run_path(str(path))["K"])
    counts = seen.reader().compilation
    assert (counts.compiled, counts.loaded, counts.ptx_jit) == (0, 2, 0)


def test_many_archs_at_once_each_its_cubin_ptx_for_the_highest_listed_in_sm_order(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """Eight archs in one run: a cubin each, PTX for the highest only, and `warm stats`
    lists them as numbers sort (sm_75 before sm_100: it listed sm_100, sm_120, sm_121,
    sm_75 ..., text order), in its tables and its JSON alike."""
    from warmcli.backends.cuda.cubin import check_cubin
    from warmcli.backends.cuda.ptx import ptx_header
    from warmcli.bundle.store import Bundle

    archs = ["sm_121", "sm_75", "sm_100", "sm_80", "sm_120", "sm_86", "sm_89", "sm_90"]
    bundle = tmp_path / "many.warm"
    run = [a for arch in archs for a in ("--arch", arch)]
    proc = warm("run", workload_file(SMALL), *run, "-b", bundle, "-q")
    assert proc.returncode == 0, proc.stderr
    with Bundle.open(bundle) as opened:
        for k in opened.kernels():
            blob = opened.blob(k.sha256)
            if k.arch == "compute_121":
                assert ptx_header(blob)[1:] == (121, "")
            else:
                check_cubin(blob, k.arch)
    in_order = sorted(archs, key=lambda a: int(a[3:]))
    doc = warm.json("stats", bundle)
    assert [k["arch"] for k in doc["kernels"]] == [*in_order[:-1], "compute_121", "sm_121"]
    shown = warm("stats", bundle).stdout
    contents, kernels = shown.split("Contents")[1].split("Kernels (9)")
    for table in (contents, kernels):
        rows = [line.split()[0] for line in table.splitlines() if line.strip().startswith("sm_")]
        assert rows == [*in_order, in_order[-1]][: len(rows)] and len(rows) == 9, table


def test_an_arch_nvrtc_does_not_build_names_its_release_once(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """It read `NVRTC NVRTC release 13.5, V13.5.37; Build CL-... does not build sm_70`."""
    proc = warm("run", workload_file(SMALL), "--arch", "sm_70", "-b", tmp_path / "old.warm")
    assert proc.returncode == 2 and "does not build sm_70; it builds sm_75" in proc.stderr
    assert "NVRTC NVRTC" not in proc.stderr and "Build CL" not in proc.stderr, proc.stderr


PYCUDA_TEMPLATES = r'''
import numpy as np
import pycuda.autoinit
import pycuda.driver as drv
import pycuda.gpuarray as gpuarray
from pycuda.compiler import SourceModule

SRC = """
__constant__ float BIAS[2];
template <typename T, int WIDTH>
__device__ T combine(T a, T b) { return a * (T)WIDTH + b + (T)BIAS[0]; }
template <typename T>
__global__ void __launch_bounds__(256) axpb(T *y, const T *x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = combine<T, SCALE>(x[i], y[i]);
}
extern "C" {
__global__ void axpb_f32(float *y, const float *x, int n) { axpb<float>(y, x, n); }
__global__ void axpb_f64(double *y, const double *x, int n) { axpb<double>(y, x, n); }
}
"""

def main():
    n = 1000
    for scale, arch in ((2, None), (3, "sm_90"), (3, None)):
        mod = SourceModule(SRC, no_extern_c=True, options=[f"-DSCALE={scale}"], arch=arch)
        for name, dtype in (("axpb_f32", np.float32), ("axpb_f64", np.float64)):
            x = gpuarray.to_gpu(np.ones(n, dtype)); y = gpuarray.zeros(n, dtype)
            mod.get_function(name)(y, x, np.int32(n), block=(256, 1, 1), grid=(4, 1))
'''


def test_an_unmodified_pycuda_script_of_templates_prebuilds_each_instance_once(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """`no_extern_c` templates behind extern "C" wrappers, `-DSCALE` options, `arch=` the
    device's own or None: one build per (entry, SCALE), each a cubin exporting its entry."""
    from warmcli.backends.cuda.cubin import check_cubin, cubin_functions
    from warmcli.bundle.store import Bundle

    bundle = tmp_path / "pycuda.warm"
    script = workload_file(PYCUDA_TEMPLATES, "script.py")
    proc = warm("run", script, "--pycuda", "--arch", "sm_90", "-b", bundle, "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with Bundle.open(bundle) as opened:
        cubins = [k for k in opened.kernels() if k.arch == "sm_90"]
        assert sorted(k.label for k in cubins) == [
            "axpb_f32[SCALE=2]",
            "axpb_f32[SCALE=3]",
            "axpb_f64[SCALE=2]",
            "axpb_f64[SCALE=3]",
        ]
        for k in cubins:
            blob = opened.blob(k.sha256)
            check_cubin(blob, "sm_90")
            assert k.symbol in cubin_functions(blob)
    other = warm("run", script, "--pycuda", "--arch", "sm_80", "-b", tmp_path / "80.warm")
    assert other.returncode == 2 and "arch='sm_90'" in other.stderr and "drop arch=" in other.stderr
