"""PyCUDA modules whose kernels share one cubin never share a global.

warm builds the kernels of several `SourceModule`s into one cubin where it can, and renames
each module's file-scope names per kernel with a `#define`. A global it leaves as it is
(a name also used as a member, a `__`-name, the second declarator of a declaration, one in
a namespace, one named by a macro, a `static` one), under PyCUDA's `extern "C"` wrap, was
one symbol for every module in the cubin: module A's kernel read the constants module B
set on a hit, its own on a cold compile of A alone. Each such module is now built in a
cubin of its own (`warmcli.backends.c_linkage`); each global warm renames keeps a name of
its own, also for two modules of one template built with other `-D` values (they had one
`warm_pc<digest>_gain`: the digest did not cover the `-D`s warm moves into its defines).
Real NVRTC/nvcc on a compile-only sm_90 device, the cubin's symbols read as the driver
would; the real CLI in a subprocess.
"""

from __future__ import annotations

import sqlite3
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import DiscardedReadWarning, ProcessMode, ProcessModeOverride
from warmcli.backends.c_linkage import unrenamed_c_names
from warmcli.backends.cuda.arch import ArchDevice
from warmcli.backends.cuda.cubin import cubin_globals
from warmcli.backends.cuda.nvrtc import find_nvrtc
from warmcli.pycuda import PyCudaError, SourceModule, bound_runtime
from warmcli.pycuda.source import mangled_global, wrap_source
from warmcli.pycuda.standins import GPUArray
from warmcli.runtime.runtime import Runtime

if find_nvrtc() is None:  # pragma: no cover - make test installs NVRTC
    pytest.skip("NVRTC not installed", allow_module_level=True)


def _build(mods: list[tuple[SourceModule, str, str]]) -> tuple[int, list[tuple[bytes, Any]]]:
    """Pre-build each (module, kernel, global) as `warm run` does; the number of compiler
    processes, and per module its kernel's cubin and the symbol its `get_global` reads."""
    rt = Runtime(ArchDevice("sm_90"), jobs=1)
    served = []
    with bound_runtime(rt), warnings.catch_warnings():
        warnings.simplefilter("ignore", DiscardedReadWarning)
        for mode in (ProcessMode.COMPILE_ONLY, ProcessMode.COMPILE_AND_AUTOTUNE):
            with ProcessModeOverride(mode) as collector:
                for mod, entry, _ in mods:
                    mod.get_function(entry)(GPUArray(64, np.float32), block=(64, 1, 1))
        c = collector.reader().compilation
        assert (c.compiled, c.failed) == (len(mods), 0)
        for mod, entry, name in mods:
            f = mod.get_function(entry)
            kernel = f.kernel(f.letters())
            _, binary = rt.kernels.module(kernel)
            if name:
                assert mod.get_global(name)[1] == 4  # served, from this module's cubin
                renamed = mod.kernel_source(entry)[1].get(name, name)
                symbol = mangled_global(cubin_globals(binary), renamed, rt.kernels.key(kernel))
                served.append((bytes(binary), symbol))
            else:
                served.append((bytes(binary), None))
    return c.compiler_processes, served


MEMBER = """
struct P { float gain; };
__constant__ float gain;
__global__ void k_%s(float *y) { P p; p.gain = 1.0f; y[threadIdx.x] *= gain + p.gain; }
"""
DUNDER = """
__constant__ float __gain;
__global__ void k_%s(float *y) { y[threadIdx.x] *= __gain; }
"""
SECOND_DECLARATOR = """
__constant__ float bias, gain;
__global__ void k_%s(float *y) { y[threadIdx.x] = y[threadIdx.x] * gain + bias; }
"""
NAMESPACE = """
namespace ns { __constant__ float gain; }
__global__ void k_%s(float *y) { y[threadIdx.x] *= ns::gain; }
"""
NAMESPACE_C = """
namespace ns { extern "C" { __constant__ float gain; } }
extern "C" __global__ void k_%s(float *y) { y[threadIdx.x] *= ns::gain; }
"""
MACRO_NAMED = """
#define GAIN_NAME gain
__constant__ float GAIN_NAME;
__global__ void k_%s(float *y) { y[threadIdx.x] *= GAIN_NAME; }
"""
OPTION_NAMED = """
__constant__ float GAIN_NAME;
__global__ void k_%s(float *y) { y[threadIdx.x] *= GAIN_NAME; }
"""
STATIC = """
  static __device__ float gain;
__global__ void k_%s(float *y) { y[threadIdx.x] *= gain; gain = y[0]; }
"""
MACRO_DECLARES = """
#define DECL(n) __constant__ float n
DECL(gain);
__global__ void k_%s(float *y) { y[threadIdx.x] *= gain; }
"""
OPTION_DECLARES = """
GLOBAL;
__global__ void k_%s(float *y) { y[threadIdx.x] *= gain; }
"""
UNDEFINED = """
#undef gain
__constant__ float gain;
__global__ void k_%s(float *y) { y[threadIdx.x] *= gain; }
"""
RESPELT = """
#ifdef ALT
#define gain alt_gain
#endif
__constant__ float gain;
__global__ void k_%s(float *y) { y[threadIdx.x] *= gain; }
"""
INITIALIZED = """
__constant__ float gain = %s;
__global__ void k_%s(float *y) { y[threadIdx.x] *= gain; }
"""
C_BLOCK = """
extern "C" { __constant__ float gain; }
extern "C" __global__ void k_%s(float *y) { y[threadIdx.x] *= gain; }
"""


@pytest.mark.parametrize(
    "source, kwargs",
    [
        (MEMBER, {}),
        (DUNDER, {}),
        (SECOND_DECLARATOR, {}),
        (NAMESPACE, {}),
        (NAMESPACE_C, {"no_extern_c": True}),
        (MACRO_NAMED, {}),
        (OPTION_NAMED, {"options": ["-DGAIN_NAME=gain"]}),
        (STATIC, {}),
        (C_BLOCK, {"no_extern_c": True}),
        (MACRO_DECLARES, {}),
        (OPTION_DECLARES, {"options": ["-DGLOBAL=__constant__ float gain"]}),
        (UNDEFINED, {}),
        (RESPELT, {"options": ["-DALT"]}),
    ],
    ids=[
        "member",
        "dunder",
        "second-declarator",
        "namespace",
        "namespace-extern-c",
        "macro",
        "option-macro",
        "static",
        "extern-c-block",
        "macro-declares",
        "option-declares",
        "undef",
        "respelt-in-a-branch",
    ],
)
def test_a_global_of_two_modules_is_never_one_symbol(source: str, kwargs: dict) -> None:
    name = {DUNDER: "__gain", RESPELT: "alt_gain"}.get(source, "gain")
    mods = [(SourceModule(source % e, **kwargs), f"k_{e}", name) for e in ("a", "b")]
    _, served = _build(mods)
    (binary_a, symbol_a), (binary_b, symbol_b) = served
    assert symbol_a is not None and symbol_b is not None
    # one cubin, loaded once: each module's global must be a symbol of its own there
    assert binary_a != binary_b or symbol_a != symbol_b, (symbol_a, symbol_b)


@pytest.mark.parametrize("source", [MEMBER, NAMESPACE, SECOND_DECLARATOR])
def test_a_module_built_alone_is_keyed_apart_from_a_shared_cubin_built_before(source: str) -> None:
    """warm before this built such a module in a cubin shared with others, keyed by the
    source PyCUDA's wrap makes (its renames before it): a bundle of then must not serve it."""
    mod = SourceModule(source % "a")
    text, renames = mod.kernel_source("k_a")
    renamed = "".join(f"#define {name} {new}\n" for name, new in renames.items())
    assert text != wrap_source(renamed + source % "a")


def test_constants_of_other_initializers_and_renamed_globals_still_share_one_cubin() -> None:
    cpp = MEMBER.replace("__global__", 'extern "C" __global__')  # C++ linkage: a namespace each
    mods = [(SourceModule(cpp % e, no_extern_c=True), f"k_{e}", "gain") for e in ("d", "e")]
    mods += [
        (SourceModule(INITIALIZED % (value, e)), f"k_{e}", "gain")
        for value, e in (("1.0f", "a"), ("2.0f", "b"))
    ]
    static = cpp.replace("__constant__", "static __device__")  # (C++ linkage too)
    mods += [(SourceModule(static % e, no_extern_c=True), f"k_{e}", "gain") for e in ("f", "g")]
    mods += [(SourceModule(C_BLOCK.replace("gain", "g") % "c", no_extern_c=True), "k_c", "g")]
    processes, served = _build(mods)
    assert processes == 1, "renamed apart: no reason to build any alone"
    assert len({symbol for _, symbol in served}) == 7, served


def test_two_modules_of_one_template_with_other_defines_keep_their_own_global() -> None:
    template = """
__constant__ float gain;
__global__ void k(float *y) { y[threadIdx.x] *= gain * SCALE; }
"""
    mods = [
        (SourceModule(template, options=[f"-DSCALE={s}"]), "k", "gain") for s in ("2.0f", "3.0f")
    ]
    _, served = _build(mods)
    (binary_a, symbol_a), (binary_b, symbol_b) = served
    assert binary_a != binary_b or symbol_a != symbol_b, (symbol_a, symbol_b)


def test_device_functions_and_dynamic_shared_memory_build_as_alone() -> None:
    helper = """
__device__ float helper(float v) { return v * %s; }
extern __shared__ float buf[];
__global__ void k_%s(float *y) {
  buf[threadIdx.x] = helper(y[threadIdx.x]);
  __syncthreads();
  y[threadIdx.x] = buf[63 - threadIdx.x];
}
"""
    mods = [(SourceModule(helper % (v, e)), f"k_{e}", "") for v, e in (("2", "a"), ("3", "b"))]
    _build(mods)  # compiled, none failed: each helper its own (renamed, or alone)
    other = helper.replace("float buf", "double buf")  # one array, declared two ways
    _build(
        [
            (SourceModule(helper % ("2", "c")), "k_c", ""),
            (SourceModule(other % ("3", "d")), "k_d", ""),
        ]
    )


def test_unrenamed_c_names_reads_every_declarator_and_namespace() -> None:
    source = (
        'extern "C" {\n#define gain warm_pc0123_gain\n__constant__ float gain, bias[4] = {1, 2};\n'
        "namespace ns { __device__ float scale; __device__ int twice(int v) { return 2 * v; } }\n"
        "struct P { float member; };\nextern __shared__ float buf[];\n"
        "__global__ void k(float *y) { __shared__ float local; }\n"
        "__global__ void other(float *y) {}\n}\n"
        "__constant__ float cpp_linkage;\n"
    )
    assert unrenamed_c_names(source, "k") == {"bias", "scale", "twice"}
    assert unrenamed_c_names(source.replace('extern "C" {', "{"), "k") == set()


def test_get_global_of_a_module_of_two_kernels_says_why_truly() -> None:
    mod = SourceModule(
        "__constant__ float c;\n__global__ void a(float *y) { y[0] = c; }\n"
        "__global__ void b(float *y) { y[1] = c; }\n"
    )
    with pytest.raises(PyCudaError) as caught:
        mod.get_global("c")
    message = str(caught.value)
    assert "cubin of its own" not in message, message
    assert "a copy of its own of the module" in message and "\n" not in message, message


WORKLOAD = '''
import numpy as np
import pycuda.autoinit
import pycuda.gpuarray as gpuarray
from pycuda.compiler import SourceModule

SRC = """
struct P { float gain; };
__constant__ float gain;
__global__ void k_%s(float *y) { P p; p.gain = 1.0f; y[threadIdx.x] *= gain + p.gain; }
"""

def main():
    y = gpuarray.zeros(64, np.float32)
    for e in ("a", "b"):
        SourceModule(SRC % e).get_function("k_" + e)(y, block=(64, 1, 1))
'''


def test_warm_run_builds_a_module_whose_global_is_a_member_name_alone(
    warm: Warm, tmp_path: Path
) -> None:
    script = tmp_path / "S.py"
    script.write_text(WORKLOAD)
    done = warm("run", script, "--pycuda", "--arch", "sm_90", "-j", "1", "-b", tmp_path / "b.warm")
    assert done.returncode == 0, done.stderr
    with sqlite3.connect(tmp_path / "b.warm") as conn:
        rows = conn.execute(
            "SELECT k.entry, b.data FROM kernels k JOIN blobs b ON b.sha256 = k.sha256"
        ).fetchall()
    conn.close()
    rows = [(entry, data) for entry, data in rows if data[:4] == b"\x7fELF"]  # (not the PTX)
    assert sorted(entry for entry, _ in rows) == ["k_a", "k_b"], rows
    (_, cubin_a), (_, cubin_b) = rows
    gains = [s for s in cubin_globals(bytes(cubin_a)) if s.endswith("gain")]
    assert cubin_a != cubin_b or len(gains) == 2, gains  # one cubin: a `gain` each
