"""warm's PyCUDA layer against real PyCUDA's launch rules (pycuda/driver.py `_build_arg_buf`,
`function_call`, `function_prepared_call`; the C++ `_set_block_shape(int, int, int)` and
`_launch_kernel(py::tuple, py::tuple, ..., unsigned, ...)` under Boost.Python, whose int
converter takes Python ints only; `_pvt_struct.pack`, whose `P` and integer letters take an
int or an object with `__index__`). Each case below passed warm's GPU-less pre-build (and
warm's GPU launch, the same code) where PyCUDA's launch raises, so a script pre-built in CI
would fail once run with PyCUDA. The real `warmcli.pycuda` on a compile-only sm_90 device, and
the real CLI with NVRTC.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import ProcessMode, ProcessModeOverride
from warmcli.backends.cuda.arch import ArchDevice
from warmcli.backends.cuda.nvrtc import find_nvrtc
from warmcli.pycuda import ArgumentError, In, Out, PyCudaError, SourceModule, bound_runtime
from warmcli.pycuda.standins import GPUArray, Stream
from warmcli.runtime.runtime import Runtime

SOURCE = "__global__ void k(float *x, int n, float a) { if (threadIdx.x < n) x[0] = a; }"
FLAG = "__global__ void g(float *x, bool on) { if (on) x[0] = 1.0f; }"


def _compile_only() -> Any:
    rt = Runtime(ArchDevice("sm_90"))
    return bound_runtime(rt), ProcessModeOverride(ProcessMode.COMPILE_ONLY)


def _x() -> GPUArray:
    return GPUArray(1, np.float32)


@pytest.mark.parametrize(
    ("n", "a"), [(3, np.float32(1.5)), (np.int32(3), 1.5), (True, np.float32(1))]
)
def test_a_python_number_in_a_call_is_refused_as_pycuda_refuses_it(n: Any, a: Any) -> None:
    """PyCUDA's `f(...)` packs numpy scalars only (`np.number`); a Python int or float has no
    `gpudata`: `TypeError: invalid type on parameter #1 (0-based)`. warm packed it as the
    declared type when it could read the declaration."""
    f = SourceModule(SOURCE).get_function("k")
    rt, mode = _compile_only()
    with rt, mode, pytest.raises(ArgumentError, match=r"argument [23]: a Python \w+ has no C"):
        f(_x(), n, a, block=(32, 1, 1))


def test_a_numpy_bool_in_a_call_is_refused_a_0d_bool_array_taken() -> None:
    """`np.bool_` is no `np.number`: PyCUDA's call raises TypeError for it; a 0-d bool array
    is packed as its one byte, which a `bool` parameter reads."""
    f = SourceModule(FLAG).get_function("g")
    rt, mode = _compile_only()
    with rt, mode:
        with pytest.raises(ArgumentError, match=r"argument 2: a numpy bool .*PyCUDA"):
            f(_x(), np.bool_(True), block=(1, 1, 1))
        f(_x(), np.array(True), block=(1, 1, 1))


@pytest.mark.parametrize(
    "sizes",
    [
        {"block": [32, 1, 1]},
        {"block": (32,)},
        {"block": (32, 1)},
        {"block": 32},
        {"block": (np.int64(32), 1, 1)},
        {"block": (32, 1, 1), "grid": [2, 1]},
        {"block": (32, 1, 1), "grid": 2},
        {"block": (32, 1, 1), "grid": (np.int32(2), 1)},
        {"block": (32, 1, 1), "shared": np.int64(64)},
    ],
)
def test_launch_sizes_pycuda_cannot_take_are_refused(sizes: dict[str, Any]) -> None:
    """PyCUDA sets the block with `_set_block_shape(*block)` (three C ints) and launches with
    `_launch_kernel(py::tuple grid, py::tuple block, ..., unsigned shared, ...)`: a list, a
    bare int, fewer than three block sizes or a numpy integer is a Boost.Python
    ArgumentError there. warm launched them all."""
    f = SourceModule(SOURCE).get_function("k")
    rt, mode = _compile_only()
    with (
        rt,
        mode,
        pytest.raises(
            PyCudaError, match=r"k\(\.\.\.\): its (block|grid|shared), .* PyCUDA's launch"
        ),
    ):
        f(_x(), np.int32(1), np.float32(1), **sizes)


def test_launch_sizes_pycuda_takes_are_taken() -> None:
    f = SourceModule(SOURCE).get_function("k")
    p = SourceModule(SOURCE).get_function("k").prepare("Pif")
    rt, mode = _compile_only()
    with rt, mode:
        for grid in [(2,), (2, 1), (2, 1, 1), ()]:  # () is PyCUDA's (1, 1, 1)
            f(_x(), np.int32(1), np.float32(1), block=(32, 1, 1), grid=grid, shared=0)
            p.prepared_call(grid, (32, 1, 1), _x().gpudata, 1, 1.0, shared_size=16)


@pytest.mark.parametrize(
    ("grid", "block", "shared"),
    [((1, 1), [32, 1, 1], 0), ([1, 1], (32, 1, 1), 0), ((1, 1), (32, 1, 1), np.int64(8))],
)
def test_prepared_call_sizes_as_pycuda_takes_them(grid: Any, block: Any, shared: Any) -> None:
    """`prepared_call(grid, block, ...)`: PyCUDA takes a block that is no tuple as the first
    argument of the pre-2011 form (its pack then fails), a list grid or a numpy shared size
    fail its `_launch_kernel`. warm took a list as the block."""
    p = SourceModule(SOURCE).get_function("k").prepare("Pif")
    rt, mode = _compile_only()
    with (
        rt,
        mode,
        pytest.raises(PyCudaError, match=r"prepared_call: its (block|grid|shared_size), "),
    ):
        p.prepared_call(grid, block, _x().gpudata, 1, 1.0, shared_size=shared)


def test_time_kernel_on_a_stream_is_refused() -> None:
    """PyCUDA asserts "Can't time the kernel on an asynchronous invocation"; warm timed it."""
    f = SourceModule(SOURCE).get_function("k")
    rt, mode = _compile_only()
    with rt, mode, pytest.raises(PyCudaError, match=r"time_kernel=True on a stream"):
        f(_x(), np.int32(1), np.float32(1), block=(32, 1, 1), stream=Stream(), time_kernel=True)


@pytest.mark.parametrize("arg", [_x(), In(np.zeros(4, np.float32))])
def test_prepared_call_takes_addresses_not_arrays(arg: Any) -> None:
    """A prepared `P` is packed by `_pvt_struct.pack`: an int or an object with `__index__`
    (a DeviceAllocation, `a_gpu.gpudata`); a GPUArray or a `drv.In` is "required argument is
    not an integer" there. warm launched them."""
    p = SourceModule(SOURCE).get_function("k").prepare("Pif")
    rt, mode = _compile_only()
    with rt, mode:
        with pytest.raises(ArgumentError, match=r"argument 1: a \w+ is no address"):
            p.prepared_call((1, 1), (32, 1, 1), arg, 1, 1.0)
        p.prepared_call((1, 1), (32, 1, 1), _x().gpudata, 1, 1.0)
        p.prepared_call((1, 1), (32, 1, 1), 0, np.int32(1), np.float32(1))


def test_prepared_integer_takes_no_numpy_bool() -> None:
    """`_pvt_struct.pack("i", np.True_)`: numpy's bool has no `__index__`, refused there."""
    p = SourceModule(SOURCE).get_function("k").prepare("Pif")
    rt, mode = _compile_only()
    with rt, mode, pytest.raises(ArgumentError, match=r"argument 2: .* is no 'i' value"):
        p.prepared_call((1, 1), (32, 1, 1), 0, np.True_, 1.0)


def test_options_as_a_tuple_is_refused() -> None:
    """PyCUDA's `compile` copies `options[:]` and extends it (`-arch`, `-I`): a tuple has no
    `extend`, an AttributeError there."""
    with pytest.raises(PyCudaError, match=r"SourceModule\(options=\('-DN=1',\)\): a list"):
        SourceModule(SOURCE, options=("-DN=1",))
    SourceModule(SOURCE, options=["-DN=1"], include_dirs=("/tmp",))  # a tuple of dirs: fine


@pytest.mark.skipif(find_nvrtc() is None, reason="NVRTC not installed")
def test_a_prebuild_of_a_script_pycuda_refuses_fails_on_one_line(
    warm: Warm, workload_file: Any, tmp_path: Path
) -> None:
    """The CI pre-build of an unmodified script that passes a Python float: it stored the
    kernel and exited 0, where the script fails under PyCUDA on a GPU."""
    script = workload_file(
        f"""
import numpy as np
import pycuda.autoinit
import pycuda.driver as cuda
from pycuda.compiler import SourceModule

def main():
    x = cuda.mem_alloc(4)
    SourceModule({SOURCE!r}).get_function("k")(x, np.int32(1), 2.5, block=(32, 1, 1))
"""
    )
    bundle = tmp_path / "p.warm"
    proc = warm("run", script, "--pycuda", "--arch", "sm_90", "--quiet", "-b", bundle)
    assert proc.returncode != 0
    assert "argument 3: a Python float has no C type" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_prepare_of_the_numpy_bool_type_is_refused() -> None:
    """PyCUDA's `prepare` takes a type with `np.number` in its MRO as its letter, anything
    else as `np.uintp`'s: `np.bool_` packs eight bytes where a `bool` parameter reads one (the
    parameters after it shift). warm made it `?` and passed what PyCUDA does not."""
    f = SourceModule(FLAG).get_function("g")
    with pytest.raises(PyCudaError, match=r"np.bool_ is no np.number, so PyCUDA's prepare"):
        f.prepare([np.intp, np.bool_])
    assert f.prepare([np.intp, np.dtype(np.bool_)]).arg_format == "P?"


def _standins() -> tuple[Any, Any]:
    from warmcli.pycuda.standins import modules

    found = modules()
    return found["pycuda.driver"], found["pycuda.gpuarray"]


@pytest.mark.parametrize("nbytes", [np.int64(64), 64.0, 0, -4])
def test_the_standin_mem_alloc_takes_what_pycudas_takes(nbytes: Any) -> None:
    """PyCUDA's `mem_alloc(size_t)` under Boost.Python: a numpy integer or a float is an
    ArgumentError ("mem_alloc(numpy.int64) did not match C++ signature"), a negative size an
    OverflowError, 0 bytes cuMemAlloc's CUDA_ERROR_INVALID_VALUE. The stand-in took them."""
    drv, _ = _standins()
    with pytest.raises(PyCudaError, match=r"mem_alloc\(.*\): PyCUDA"):
        drv.mem_alloc(nbytes)
    assert drv.mem_alloc(64).nbytes == 64


def test_the_standin_gpuarray_takes_what_pycudas_takes() -> None:
    """`gpuarray.empty` is PyCUDA's `GPUArray`, whose dtype has no default (`zeros`' has);
    a float size is a float byte count for `mem_alloc` (refused there), where the stand-in
    truncated it; `to_gpu` reads `ary.shape`, which a list has not."""
    _, gpuarray = _standins()
    with pytest.raises(TypeError, match="dtype"):
        gpuarray.empty(64)
    with pytest.raises(TypeError, match="dtype"):
        gpuarray.GPUArray((64,))
    assert gpuarray.zeros(64).dtype == np.float64
    with pytest.raises(PyCudaError, match=r"GPUArray\(\(32\.5,\)\): PyCUDA"):
        gpuarray.empty((65 / 2,), np.float32)
    with pytest.raises(PyCudaError, match=r"to_gpu\(list\): PyCUDA"):
        gpuarray.to_gpu([1.0, 2.0])
    assert gpuarray.empty((np.int64(4), 2), np.float32).shape == (4, 2)


def test_the_standin_copies_take_what_pycudas_take() -> None:
    """`GPUArray.set` raises ValueError for another dtype ("ary and self must have the same
    dtype") and reads `ary.size` (a list has none); `memcpy_htod` reads a contiguous buffer
    (a list has none; a strided view is refused). The stand-ins checked the size only."""
    drv, gpuarray = _standins()
    y = gpuarray.zeros(4, np.float32)
    with pytest.raises(PyCudaError, match=r"GPUArray.set: float64 into float32"):
        y.set(np.zeros(4))
    with pytest.raises(PyCudaError, match=r"GPUArray.set: a list"):
        y.set([0.0] * 4)
    y.set(np.zeros(4, np.float32))
    x = drv.mem_alloc(64)
    for src in ([1.0, 2.0], np.zeros(8, np.float32)[::2]):
        with pytest.raises(PyCudaError, match=r"memcpy_htod: .*contiguous buffer"):
            drv.memcpy_htod(x, src)
    drv.memcpy_htod(x, np.zeros(8, np.float32))


@pytest.mark.parametrize("handler", [In, Out])
def test_an_empty_array_to_copy_is_refused(handler: Any) -> None:
    """PyCUDA's `drv.In`/`Out` allocate with `mem_alloc_like(array)`: 0 bytes is cuMemAlloc's
    CUDA_ERROR_INVALID_VALUE, so the launch fails there; warm allocated one byte and ran."""
    f = SourceModule(SOURCE).get_function("k")
    rt, mode = _compile_only()
    with rt, mode, pytest.raises(ArgumentError, match=r"an empty array: PyCUDA allocates"):
        f(handler(np.zeros(0, np.float32)), np.int32(0), np.float32(1), block=(32, 1, 1))
