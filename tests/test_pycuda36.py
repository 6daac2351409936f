"""A PyCUDA code base moved onto warm: template-built modules, a `no_extern_c` C++ module
with an include folder, `prepare`/`prepared_call` written as older PyCUDA code writes it,
a struct passed by value, operator overloads, a device function pointer, a `__constant__`
beside `cuda_fp16.h`, nvcc's target options, a kernel named by a `-D` option, a precision
switch in `#ifdef` branches. Each must pre-build what a GPU run compiles (what nvcc builds
for PyCUDA), or stop on one line naming what warm does not serve (never a line about
something else). The real CLI in a subprocess with real NVRTC, or the real
`warmcli.pycuda` on a compile-only sm_90 device (real NVRTC or nvcc).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import DiscardedReadWarning, ProcessMode, ProcessModeOverride
from warmcli.backends.cuda.arch import ArchDevice
from warmcli.backends.cuda.nvrtc import find_nvrtc
from warmcli.bundle.store import Bundle
from warmcli.errors import ArgumentError, KernelCompileError
from warmcli.pycuda import PyCudaError, SourceModule, bound_runtime
from warmcli.pycuda.source import declared_names
from warmcli.pycuda.standins import GPUArray, Stream
from warmcli.runtime.runtime import Runtime

if find_nvrtc() is None:  # pragma: no cover - make test installs NVRTC
    pytest.skip("NVRTC not installed", allow_module_level=True)

APP = r'''
import os
import numpy as np
import pycuda.autoinit
import pycuda.driver as drv
import pycuda.gpuarray as gpuarray
from pycuda.compiler import SourceModule

INC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inc")
TEMPLATE = """
#define BLOCK %(block)d
__global__ void saxpy_%(name)s(float *y, const float *x, float a, int n)
{
  int i = blockIdx.x * BLOCK + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
"""
CPP = """
#include "common.cuh"
template <typename T>
__device__ void axpy(T *y, const T *x, T a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * sq(x[i]) + y[i] * SCALE;
}
extern "C" __global__ void axpy_f(float *y, const float *x, float a, int n)
{ axpy<float>(y, x, a, n); }
"""

def main():
    n = 1024
    x = gpuarray.to_gpu(np.ones(n, np.float32))
    y = gpuarray.zeros(n, np.float32)
    for block, name in ((128, "a"), (256, "b"), (128, "a")):
        f = SourceModule(TEMPLATE % {"block": block, "name": name}).get_function("saxpy_" + name)
        f(y, x, np.float32(2.0), np.int32(n), block=(block, 1, 1), grid=(n // block, 1))
    af = SourceModule(CPP, no_extern_c=True, include_dirs=[INC]).get_function("axpy_f")
    af.prepare("PPfi")
    af.prepared_call((4, 1), (256, 1, 1), y.gpudata, x.gpudata, np.float32(1.5), n)
'''

HEADER = "#pragma once\n#define SCALE %s\n__device__ inline float sq(float x) { return x * x; }\n"


def _prebuild(warm: Warm, script: Path, bundle: Path):
    return warm("run", script, "--pycuda", "--arch", "sm_90", "--quiet", "-b", bundle)


def test_template_modules_and_a_header_are_keyed_as_pycuda_keys_them(
    warm: Warm, tmp_path: Path
) -> None:
    """Each template variant is a kernel of its own, the repeated one is the same key, and
    a changed header (PyCUDA's cache checks its dependencies) is a new build of its user."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "common.cuh").write_text(HEADER % "2.0f")
    script = tmp_path / "app.py"
    script.write_text(APP)
    bundle = tmp_path / "a.warm"
    proc = _prebuild(warm, script, bundle)
    assert proc.returncode == 0, proc.stderr
    assert "stored 6 new kernel(s)" in proc.stdout  # 3 kernels: cubin and PTX each
    with Bundle.open(bundle) as b:
        assert sorted(k.entry for k in b.kernels()) == sorted(2 * ["saxpy_a", "saxpy_b", "axpy_f"])
    proc = _prebuild(warm, script, bundle)
    assert proc.returncode == 0 and "stored 0 new kernel(s)" in proc.stdout, proc.stdout
    (tmp_path / "inc" / "common.cuh").write_text(HEADER % "3.0f")
    proc = _prebuild(warm, script, bundle)
    assert proc.returncode == 0 and "stored 2 new kernel(s)" in proc.stdout, proc.stdout


LEGACY = """
import numpy as np
import pycuda.autoinit
import pycuda.driver as drv
import pycuda.gpuarray as gpuarray
from pycuda.compiler import SourceModule
SRC = "__global__ void k(float *y, const float *x, int n) { if (threadIdx.x < n) y[0] = x[0]; }"
def main():
    x = gpuarray.zeros(256, np.float32); y = gpuarray.zeros(256, np.float32)
    f = SourceModule(SRC).get_function("k")
    f.prepare("PPi", block=(256, 1, 1))
    f.prepared_call((1, 1), y.gpudata, x.gpudata, 256)
"""


def test_a_block_given_to_prepare_is_refused_naming_it(warm: Warm, tmp_path: Path) -> None:
    """Code written for PyCUDA before 2011.1 sets the block in `prepare(..., block=)` and
    leaves it out of `prepared_call`; today's PyCUDA refuses that keyword. warm took it,
    dropped it, and then said `k takes 3 arguments ('PPi'), got 2` of a call passing 3."""
    script = tmp_path / "legacy.py"
    script.write_text(LEGACY)
    proc = _prebuild(warm, script, tmp_path / "l.warm")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "got 2" not in proc.stderr, proc.stderr
    assert "k.prepare(block=(256, 1, 1))" in proc.stderr, proc.stderr
    assert "prepared_call(grid, block, *args" in proc.stderr, proc.stderr


SOURCE = "__global__ void k(float *y, int n) { if (threadIdx.x < n) y[threadIdx.x] = 1.0f; }"


@pytest.mark.parametrize("keyword", ["block", "shared"])
def test_prepare_takes_no_block_or_shared_size(keyword: str) -> None:
    f = SourceModule(SOURCE).get_function("k")
    value = (64, 1, 1) if keyword == "block" else 256
    with pytest.raises(PyCudaError, match=rf"k\.prepare\({keyword}=.*: .* on each call"):
        f.prepare("Pi", **{keyword: value})


@pytest.mark.parametrize("call", ["prepared_call", "prepared_async_call", "prepared_timed_call"])
def test_a_prepared_call_without_its_block_is_named_as_such(call: str) -> None:
    """`prepared_async_call(grid, stream, *args)` (the block left out, as pre-2011 code
    does) took the stream as the block and the first argument as the stream:
    `a StandInAllocation stream on sm_90, which has no GPU`."""
    f = SourceModule(SOURCE).get_function("k").prepare("Pi")
    y = GPUArray(64, np.float32)
    rt = Runtime(ArchDevice("sm_90"))
    rt.allow_discarded_reads = True  # the timed call's time
    with bound_runtime(rt), ProcessModeOverride(ProcessMode.COMPILE_ONLY):
        args = (Stream(), y.gpudata, 64) if call == "prepared_async_call" else (y.gpudata, 64)
        with pytest.raises(PyCudaError, match=rf"k\.{call}: its block, .* is no block size"):
            getattr(f, call)((1, 1), *args)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DiscardedReadWarning)
            getattr(f, call)((1, 1), (64, 1, 1), *args)  # (a list is PyCUDA's first argument)


STRUCT = """
struct Params { float a; int n; };
__global__ void ks(float *y, Params p) { if (threadIdx.x < p.n) y[threadIdx.x] *= p.a; }
"""


def test_a_struct_passed_by_value_is_refused_as_one() -> None:
    """PyCUDA passes a numpy structured scalar as its bytes; warm passes no struct by
    value, and said `cannot pass a void as device memory` (as if it were a pointer)."""
    p = np.zeros((), dtype=[("a", np.float32), ("n", np.int32)])[()]
    f = SourceModule(STRUCT).get_function("ks")
    with bound_runtime(Runtime(ArchDevice("sm_90"))), ProcessModeOverride(ProcessMode.COMPILE_ONLY):
        with pytest.raises(ArgumentError, match=r"argument 2: a struct passed by value"):
            f(GPUArray(64, np.float32), p, block=(64, 1, 1))
    with pytest.raises(PyCudaError, match=r"ks\.prepare.*a struct passed by value"):
        f.prepare([np.intp, p.dtype])


OPERATORS = """
__device__ float2 operator+(float2 a, float2 b) { return make_float2(a.x + b.x, a.y + b.y); }
__device__ inline float2 operator*(float s, float2 a) { return make_float2(s * a.x, s * a.y); }
__global__ void axpy2(float2 *y, const float2 *x, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] + 2.0f * x[i];
}
__global__ void add2(float2 *y, const float2 *x, int n)
{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] + x[i];
}
"""


@pytest.mark.parametrize("no_extern_c", [False, True])
def test_a_module_defining_operators_compiles_as_under_pycuda(no_extern_c: bool) -> None:
    """nvcc compiles a module whose `__device__` helpers are operator overloads (in PyCUDA's
    `extern "C"` wrap too); warm renamed `operator` per kernel with a `#define`, so every
    kernel of it failed its compile (`expected a ";"`, `defines no function named ...`)."""
    source = OPERATORS
    if no_extern_c:
        source = source.replace("__global__", 'extern "C" __global__')
    mod = SourceModule(source, no_extern_c=no_extern_c)
    rt = Runtime(ArchDevice("sm_90"), jobs=1)
    y = GPUArray(64, np.complex64)
    with bound_runtime(rt):
        for mode in (ProcessMode.COMPILE_ONLY, ProcessMode.COMPILE_AND_AUTOTUNE):
            with ProcessModeOverride(mode) as collector:
                for name in ("axpy2", "add2"):
                    mod.get_function(name)(y, y, np.int32(64), block=(64, 1, 1))
    c = collector.reader().compilation
    assert (c.compiled, c.failed) == (2, 0)


POINTERS = """
__device__ float twice(float x) { return 2.0f * x; }
__device__ float (*op)(float) = twice;
__global__ void apply(float *y, int n) { if (threadIdx.x < n) y[threadIdx.x] = op(y[threadIdx.x]); }
__global__ void fill(float *y, int n) { if (threadIdx.x < n) y[threadIdx.x] = 1.0f; }
"""


def test_a_device_function_pointer_is_renamed_by_its_own_name() -> None:
    """`__device__ float (*op)(float) = twice;` (a dispatch table's entry) declares `op`;
    warm read its name as `float` and renamed the type (`#define float warm_pc..._float`),
    so no kernel of the module compiled."""
    mod = SourceModule(POINTERS)
    assert "float" not in declared_names(POINTERS) and "op" in declared_names(POINTERS)
    rt = Runtime(ArchDevice("sm_90"), jobs=1)
    with bound_runtime(rt):
        for mode in (ProcessMode.COMPILE_ONLY, ProcessMode.COMPILE_AND_AUTOTUNE):
            with ProcessModeOverride(mode) as collector:
                for name in ("apply", "fill"):
                    mod.get_function(name)(GPUArray(64, np.float32), np.int32(64), block=(64, 1, 1))
    c = collector.reader().compilation
    assert (c.compiled, c.failed) == (2, 0)


@pytest.mark.parametrize(
    "options", [["-gencode", "arch=compute_90,code=sm_90"], ["-code=sm_90"], ["-c"]]
)
def test_an_nvcc_target_option_is_reserved_under_nvrtc_too(options: list[str]) -> None:
    """NVRTC (the default) answered `-gencode ...` with its log and `warm: NVRTC takes its own
    options, not nvcc's: --compiler nvcc takes nvcc's`, where nvcc then refuses it as
    reserved: the advice led to a second failure. It is reserved under both."""
    f = SourceModule(SOURCE, options=options).get_function("k")
    rt = Runtime(ArchDevice("sm_90"), jobs=1)
    with bound_runtime(rt), pytest.raises(KernelCompileError) as failed:
        for mode in (ProcessMode.COMPILE_ONLY, ProcessMode.COMPILE_AND_AUTOTUNE):
            with ProcessModeOverride(mode):
                f(GPUArray(64, np.float32), np.int32(64), block=(64, 1, 1))
    assert f"option {options[0]!r} is reserved" in str(failed.value), str(failed.value)
    assert "--compiler nvcc" not in str(failed.value)


def test_prepare_letters_of_the_declared_width_take_the_declared_type() -> None:
    """`prepare("PiBI")` for `(float *, unsigned int, bool, int)`: PyCUDA packs each value
    in the width the kernel reads, as an unprepared call's np.int32 for an `unsigned int`,
    which warm takes; warm built the kernel for the letters as given and failed its compile
    (`parameter letters 'PiBI' do not match ...`). A wider letter is still refused there."""
    source = (
        "__global__ void k(float *y, unsigned int n, bool on, int m)"
        " { if (on && threadIdx.x < n) y[threadIdx.x] = m; }"
    )
    f = SourceModule(source).get_function("k").prepare("PiBI")
    rt = Runtime(ArchDevice("sm_90"), jobs=1)
    y = GPUArray(64, np.float32)
    with bound_runtime(rt):
        for mode in (ProcessMode.COMPILE_ONLY, ProcessMode.COMPILE_AND_AUTOTUNE):
            with ProcessModeOverride(mode) as collector:
                f.prepared_call((1, 1), (64, 1, 1), y.gpudata, 64, True, 3)
        c = collector.reader().compilation
        assert (c.compiled, c.failed) == (1, 0)
        with pytest.raises(ArgumentError, match=r"argument 2: -1 is no 'I' value"):
            f.prepared_call((1, 1), (64, 1, 1), y.gpudata, -1, True, 3)


FP16 = """
#include <cuda_fp16.h>
__constant__ float y[9];
extern "C" __global__ void conv(float *out, int n)
{ if (threadIdx.x < n) out[threadIdx.x] = y[0] + __half2float(__float2half(1.0f)); }
"""


def test_a_cpp_linkage_global_is_not_renamed_into_the_headers() -> None:
    """In a `no_extern_c` module a file-scope `__constant__ float y[9]` has C++ linkage
    (each kernel's namespace keeps it apart); warm renamed it with a `#define` before the
    source's `#include <cuda_fp16.h>`, whose `float2`'s `a.y` then named no member: nvcc
    (as PyCUDA runs it) builds the module. Its `get_global` is still served."""
    mod = SourceModule(FP16, no_extern_c=True)
    rt = Runtime(ArchDevice("sm_90", compiler="nvcc"), jobs=1)
    with bound_runtime(rt):
        with ProcessModeOverride(ProcessMode.COMPILE_ONLY) as collector:
            _, size = mod.get_global("y")
            mod.get_function("conv")(GPUArray(64, np.float32), np.int32(64), block=(64, 1, 1))
    assert size == 36
    c = collector.reader().compilation
    assert (c.compiled, c.failed) == (1, 0)


@pytest.mark.parametrize("indent", ["", "  "])
def test_a_kernel_named_by_a_define_option_is_got_and_compiled(indent: str) -> None:
    """`__global__ void KNAME(...)` built with `options=["-DKNAME=fill_128"]` has the entry
    `fill_128` in PyCUDA's cubin; warm refused `get_function("fill_128")` ("no such kernel
    in it"), reading the name in the source text only, and (indented) renamed the macro
    `KNAME` per kernel, so its compile found no `fill_128`."""
    source = indent + "__global__ void KNAME(float *y) { y[threadIdx.x] = 1.0f; }"
    mod = SourceModule(source, options=["-DKNAME=fill_128"])
    rt = Runtime(ArchDevice("sm_90"), jobs=1)
    with bound_runtime(rt):
        for mode in (ProcessMode.COMPILE_ONLY, ProcessMode.COMPILE_AND_AUTOTUNE):
            with ProcessModeOverride(mode) as collector:
                mod.get_function("fill_128")(GPUArray(64, np.float32), block=(64, 1, 1))
    c = collector.reader().compilation
    assert (c.compiled, c.failed) == (1, 0)
    with pytest.raises(PyCudaError, match="no such kernel"):
        mod.get_function("fill_64")


PRECISION = """
#ifdef USE_DOUBLE
__global__ void scale(double *y, double a)
#else
__global__ void scale(float *y, float a)
#endif
{ y[threadIdx.x] *= a; }
"""


def test_a_kernel_declared_in_two_preprocessor_branches_takes_its_arguments() -> None:
    """A precision switch (`#ifdef USE_DOUBLE` around two declarations of one kernel) was
    read as one declaration of three parameters, 'PPf': no call could launch it
    (`scale takes 3 arguments ('PPf'), got 2`). Its types come from the arguments then,
    as PyCUDA's do."""
    rt = Runtime(ArchDevice("sm_90"), jobs=1)
    for options, dtype in (([], np.float32), (["-DUSE_DOUBLE"], np.float64)):
        f = SourceModule(PRECISION, options=options).get_function("scale")
        with bound_runtime(rt):
            for mode in (ProcessMode.COMPILE_ONLY, ProcessMode.COMPILE_AND_AUTOTUNE):
                with ProcessModeOverride(mode) as collector:
                    f(GPUArray(64, dtype), dtype(2), block=(64, 1, 1))
        c = collector.reader().compilation
        assert (c.compiled, c.failed) == (1, 0)


def test_prepare_intp_is_a_pointer_beside_a_type_not_read() -> None:
    """PyCUDA's `prepare([np.intp, np.float32])` for `k(real *y, real a)` (`real` a typedef):
    `a`'s type is not read, so warm read no parameter at all and built the kernel for 'lf',
    which failed its compile (`letter 'l' (int64), declared 'real *y'`)."""
    source = "typedef float real;\n__global__ void k(real *y, real a) { y[threadIdx.x] *= a; }\n"
    f = SourceModule(source).get_function("k").prepare([np.intp, np.float32])
    rt = Runtime(ArchDevice("sm_90"), jobs=1)
    with bound_runtime(rt):
        for mode in (ProcessMode.COMPILE_ONLY, ProcessMode.COMPILE_AND_AUTOTUNE):
            with ProcessModeOverride(mode) as collector:
                f.prepared_call((1, 1), (64, 1, 1), GPUArray(64, np.float32).gpudata, 2.0)
    c = collector.reader().compilation
    assert (c.compiled, c.failed) == (1, 0)


def test_a_global_named_as_a_vector_member_is_not_renamed_into_a_header(tmp_path: Path) -> None:
    """`__constant__ float w[4]` (a filter's weights) in a module whose header reads a
    `float4`'s `.w`: warm's `#define w warm_pc..._w` reached the header, so neither
    kernel compiled (`class "float4" has no member "warm_pc..._w"`)."""
    (tmp_path / "vec.cuh").write_text("__device__ inline float last(float4 v) { return v.w; }\n")
    source = """#include "vec.cuh"
__constant__ float w[4];
__global__ void k1(float *y) { y[threadIdx.x] = w[0] + last(make_float4(1, 2, 3, 4)); }
__global__ void k2(float *y) { y[threadIdx.x] = w[1]; }
"""
    mod = SourceModule(source, include_dirs=[str(tmp_path)])
    rt = Runtime(ArchDevice("sm_90"), jobs=1)
    with bound_runtime(rt):
        for mode in (ProcessMode.COMPILE_ONLY, ProcessMode.COMPILE_AND_AUTOTUNE):
            with ProcessModeOverride(mode) as collector:
                for name in ("k1", "k2"):
                    mod.get_function(name)(GPUArray(64, np.float32), block=(64, 1, 1))
    c = collector.reader().compilation
    assert (c.compiled, c.failed) == (2, 0)
