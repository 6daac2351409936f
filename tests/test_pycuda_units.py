"""warmcli.pycuda's pure logic: PyCUDA's `extern "C"` wrap, signatures read from source,
argument conversion, and the calls it refuses. No compiler, no GPU.

Objects standing in for other libraries' device arrays here are fakes of their
documented protocol (`__cuda_array_interface__`, PyCUDA's class names), named as such.
"""

from __future__ import annotations

import numpy as np
import pytest

from warmcli import Buffer, Runtime
from warmcli.backends.cuda.arch import ArchDevice
from warmcli.pycuda import ArgumentError, In, InOut, Out, PyCudaError, SourceModule, bound_runtime
from warmcli.pycuda.args import convert, describe, staged, wrap
from warmcli.pycuda.source import (
    declared_names,
    isolated_source,
    kernel_signatures,
    mangled_global,
    wrap_source,
)
from warmcli.pycuda.standins import GPUArray, StandInAllocation

SAXPY = """
__global__ void __launch_bounds__(256)
saxpy(float a, const float * __restrict__ x, float *y, unsigned int n) { y[0] = a * x[0]; }
"""


def test_extern_c_wrap_is_pycudas() -> None:
    assert wrap_source("X") == 'extern "C" {\nX\n}\n'
    assert wrap_source("X", no_extern_c=True) == "X"


def test_signatures_are_read_from_declarations() -> None:
    source = (
        SAXPY
        + """
    __global__ void empty(void) {}
    __global__ void wide(long long a, size_t b, short c, unsigned char d, double e, bool f) {}
    struct P { float v; };
    __global__ void by_value(P p) {}
    // __global__ void commented(int x) {}
    """
    )
    sigs = kernel_signatures(source)
    assert sigs == {
        "saxpy": "fPPI",
        "empty": "",
        "wide": "qQhBd?",
        "by_value": None,
    }


def test_file_scope_names_are_renamed_per_kernel_but_not_members() -> None:
    source = """
    __constant__ float coeff[4];
    __device__ float twice(float x) { return 2 * x; }
    __device__ float w;
    __global__ void a(float4 *v) { v[0].w = twice(coeff[0]) + w; }
    __global__ void b(float *v) { v[0] = twice(coeff[1]); }
    """
    assert declared_names(source) == ["coeff", "twice", "w", "a", "b"]
    body, renames = isolated_source(source, "a")
    assert set(renames) == {"coeff", "twice", "b"}, "the entry and a member name (.w) stay"
    assert all(new.startswith("warm_pc") and new.endswith(old) for old, new in renames.items())
    _, other = isolated_source(source, "b")
    assert other["coeff"] != renames["coeff"], "each kernel's copy gets names of its own"
    assert body.startswith("#define coeff ")


def test_mangled_global_finds_plain_and_namespaced_symbols() -> None:
    assert mangled_global({"c": 4}, "c") == "c"
    assert mangled_global({"_ZN21warm_0123456789abcdef1cE": 4}, "c") == (
        "_ZN21warm_0123456789abcdef1cE"
    )
    assert mangled_global({"warm_0123456789abcdef_c": 4}, "c") == "warm_0123456789abcdef_c"
    assert mangled_global({"d": 4}, "c") is None


class FakeCudaArray:
    """Fake of the `__cuda_array_interface__` protocol (CuPy, PyTorch, Numba export it)."""

    def __init__(
        self,
        pointer: int,
        shape: tuple[int, ...],
        typestr: str,
        strides: tuple[int, ...] | None = None,
    ) -> None:
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": typestr,
            "data": (pointer, False),
            "strides": strides,
            "version": 3,
        }


class DeviceAllocation:
    """Fake named as PyCUDA's class: recognised by name, its pointer from `int()`."""

    def __int__(self) -> int:
        return 0xABC000


def test_wrap_turns_foreign_memory_into_buffers() -> None:
    cai = wrap(FakeCudaArray(0x7F00, (3, 4), "<f4"), "cuda:0")
    assert (cai.shape, cai.dtype, cai.handle) == ((3, 4), "float32", 0x7F00)
    raw = wrap(DeviceAllocation(), "cuda:0", shape=(8,), dtype="int32")
    assert (raw.shape, raw.dtype, raw.handle) == ((8,), "int32", 0xABC000)
    array = wrap(GPUArray((2, 5), np.float64), "sm_90")
    assert (array.shape, array.dtype, array.handle) == ((2, 5), "float64", None)
    assert wrap(StandInAllocation(64), "sm_90").shape == (64,)
    assert int(StandInAllocation(64)) == 0, "a null pointer: `int(x.gpudata)` pre-builds too"
    with pytest.raises(ArgumentError, match="cannot pass a list as device memory"):
        wrap([1, 2], "cuda:0")


def test_wrap_refuses_a_strided_view_and_takes_contiguous_strides() -> None:
    """A view with gaps (`C[:, :n]`) is not the shape x itemsize bytes from its pointer that
    a `Buffer` is: warm's reads and a tune's restore of its inputs would miss or overwrite
    the memory between its rows, so a cold start and a hit would differ. Refused, named."""
    with pytest.raises(ArgumentError, match="not contiguous"):
        wrap(FakeCudaArray(0x7F00, (3, 4), "<f4", strides=(32, 4)), "cuda:0")
    with pytest.raises(ArgumentError, match="not contiguous"):
        wrap(FakeCudaArray(0x7F00, (3, 4), "<f4", strides=(4, 12)), "cuda:0")  # transposed
    same = wrap(FakeCudaArray(0x7F00, (3, 4), "<f4", strides=(16, 4)), "cuda:0")
    assert same.shape == (3, 4)
    assert wrap(FakeCudaArray(0x7F00, (0, 4), "<f4", strides=(99, 4)), "cuda:0").shape == (0, 4)
    assert wrap(FakeCudaArray(0x7F00, (1, 4), "<f4", strides=(99, 4)), "cuda:0").shape == (1, 4)

    view = GPUArray((2, 5), np.float32)
    view.strides = (40, 4)  # a GPUArray view (`a[:, :5]` of a 2x10): PyCUDA keeps its strides
    with pytest.raises(ArgumentError, match="not contiguous"):
        wrap(view, "sm_90")


def test_wrap_judges_contiguity_as_numpy_does() -> None:
    """Every layout of up to three dimensions (sizes 0-3, strides of a few itemsizes, each
    sign): taken exactly where numpy calls the view C-contiguous (C order is seen on a
    fast path, as each launch asks it of each array argument)."""
    import itertools

    base = np.zeros(4096, np.float32)
    for ndim in (1, 2, 3):
        for shape in itertools.product(range(4), repeat=ndim):
            for strides in itertools.product((4, 8, 12, 16, -4), repeat=ndim):
                view = np.lib.stride_tricks.as_strided(base[2048:], shape, strides)
                fake = FakeCudaArray(0x7F00, shape, "<f4", strides=strides)
                if view.flags.c_contiguous:
                    assert wrap(fake, "cuda:0").shape == shape
                else:
                    with pytest.raises(ArgumentError, match="not contiguous"):
                        wrap(fake, "cuda:0")


def test_runtime_wrap_is_the_same_layer() -> None:
    rt = Runtime(ArchDevice("sm_90"))
    buffer = rt.wrap(FakeCudaArray(0x1000, (16,), "<i8"))
    assert isinstance(buffer, Buffer) and buffer.device_id == "sm_90" and buffer.dtype == "int64"


def test_convert_scalars_pointers_and_copies() -> None:
    x = np.arange(4, dtype=np.float32)
    values, handlers = convert(
        "PPIfq",
        [In(x), GPUArray(4, np.float32), np.uint32(2**32 - 1), 2.5, DeviceAllocation()],
        "sm_90",
        "k",
    )
    assert isinstance(values[0], Buffer) and values[0].shape == (4,)
    assert isinstance(values[1], Buffer)
    assert values[2] == np.uint32(2**32 - 1) and values[2].dtype == np.uint32, "stays unsigned"
    assert values[3] == np.float32(2.5) and values[3].dtype == np.float32
    assert values[4] == np.int64(0xABC000), "a pointer prepared as np.intp travels as int64"
    assert list(handlers) == [0] and handlers[0].copies_in and not handlers[0].copies_out


def test_copy_directions_of_warm_and_pycuda_handlers() -> None:
    x = np.zeros(3, np.float32)
    assert staged(Out(x)).copies_out and not staged(Out(x)).copies_in
    both = staged(InOut(x))
    assert both.copies_in and both.copies_out and both.label == "drv.InOut(float32[3])"

    # fakes named as pycuda.driver's classes: recognised by their names
    handler = type("ArgumentHandler", (), {"__init__": lambda self, a: setattr(self, "array", a)})
    found = staged(type("Out", (handler,), {})(x))
    assert found is not None and found.copies_out and not found.copies_in
    with pytest.raises(ArgumentError, match="contiguous writable"):
        staged(Out(np.zeros((4, 4), np.float32)[:, 1]))


def test_calls_pycuda_refuses_are_refused_with_the_reason() -> None:
    mod = SourceModule("__global__ void f(float *x, int n) { x[0] = n; }")
    f = mod.get_function("f")
    assert f.signature == "Pi"
    with pytest.raises(PyCudaError, match="must specify block size"):
        f(GPUArray(1, np.float32), np.int32(1))
    with bound_runtime(Runtime(ArchDevice("sm_90"))):
        with pytest.raises(ArgumentError, match="a float64 scalar for a parameter declared int32"):
            f(GPUArray(1, np.float32), np.float64(1), block=(1, 1, 1))
        # an 8-byte integer is an address, as PyCUDA packs it (np.uintp(ptr)); a 4-byte one no
        with pytest.raises(ArgumentError, match="f argument 1: a int32 scalar for a pointer"):
            f(np.int32(0), np.int32(1), block=(1, 1, 1))
    with pytest.raises(PyCudaError, match="no such kernel"):
        mod.get_function("g")
    with pytest.raises(PyCudaError, match=r"get_texref\('tex'\): texture and surface references"):
        mod.get_texref("tex")
    with pytest.raises(PyCudaError, match="warm compiles with its device's nvcc"):
        SourceModule("", nvcc="/opt/nvcc")
    # np.intp where the declaration has a pointer is that pointer (its kernel compiles)
    assert f.prepare([np.intp, np.int32]).arg_format == "Pi"
    with pytest.raises(PyCudaError, match="warm passes the letters"):
        f.prepare("Pe")
    two = SourceModule("__constant__ float c;\n__global__ void a() {}\n__global__ void b() {}")
    with pytest.raises(PyCudaError, match=r"get_global\('c'\): the module holds 2 kernels"):
        two.get_global("c")


def test_unknown_signature_takes_letters_from_numpy_types_only() -> None:
    mod = SourceModule("#define ARGS float *x, int n\n__global__ void f(ARGS) {}")
    f = mod.get_function("f")
    assert f.signature is None
    with bound_runtime(Runtime(ArchDevice("sm_90"))):
        with pytest.raises(ArgumentError, match=r"a Python int has no C type: pass a numpy"):
            f(GPUArray(1, np.float32), 3, block=(1, 1, 1))


def test_arch_must_be_the_devices() -> None:
    mod = SourceModule("__global__ void f(float *x) {}", arch="sm_80")
    with bound_runtime(Runtime(ArchDevice("sm_90"))):
        with pytest.raises(PyCudaError, match=r"SourceModule\(arch='sm_80'\).*sm_90"):
            mod.get_function("f")(GPUArray(1, np.float32), block=(1, 1, 1))


def test_describe_keys_arrays_by_shape_and_scalars_by_value() -> None:
    assert describe(np.int32(7)) == 7
    assert describe(In(np.zeros((2, 3), np.float32))) == "float32[2x3]"
    assert describe(GPUArray(5, np.int8)) == "int8[5]"


@pytest.mark.parametrize(
    ("options", "kept", "defines"),
    [
        (["-DB=128", "-O3"], ("-O3",), {"B": "128"}),  # alone: lifted (variants batch)
        (["-DX=1", "-UX"], ("-DX=1", "-UX"), {}),  # nvcc's order: X undefined
        (["-UX", "-DX=1"], ("-UX", "-DX=1"), {}),
        (["-DX=1", "-DX=2"], ("-DX=1", "-DX=2"), {}),  # the last wins, as in nvcc
        (["-DX=1", "-DY", "-U", "X"], ("-DX=1", "-U", "X"), {"Y": "1"}),
        (["-DX=1", "--undefine-macro=X"], ("-DX=1", "--undefine-macro=X"), {}),
        (["-D", "X=1", "-DX=2"], ("-D", "X=1", "-DX=2"), {}),
    ],
)
def test_defines_are_lifted_only_where_no_other_option_names_the_macro(
    options: list[str], kept: tuple[str, ...], defines: dict[str, str]
) -> None:
    mod = SourceModule("__global__ void f(float *x) { x[0] = 1; }", options=options)
    assert (mod.options, mod.defines) == (kept, defines)
