"""Shape-only stand-ins for PyCUDA's allocation calls, for a GPU-less pre-build (`--arch`).

A PyCUDA script allocates through `drv.mem_alloc`, `gpuarray.to_gpu` and friends, which need
libcuda and a GPU. Under `warm run --pycuda --arch sm_90` these modules stand in for
`pycuda`, `pycuda.driver`, `pycuda.gpuarray`, `pycuda.autoinit` (and
`pycuda.autoprimaryctx`, the same), `pycuda.characterize` and `pycuda.compiler`: the device,
its contexts (the one warm launches in), the versions and `PointerHolderBase` are
`warmcli.pycuda.standin_device`'s, `gpuarray.vec` and `characterize`
`warmcli.pycuda.standin_vec`'s; allocations know their size, shape and dtype and nothing
else (like warm's own buffers on a compile-only device; their pointer is null, and nothing
is ever launched or copied there) and take what PyCUDA's take, in its order (`mem_alloc` a
Python int > 0, int sizes, a dtype for `empty`, an allocator third), a `GPUArray`'s shape
operations (`reshape`, `ravel`, `view`, `transpose`, slicing, `copy`) give such arrays, its
arithmetic (PyCUDA's elementwise kernels) is refused naming the operator, copies to and on
the device check sizes (and what PyCUDA's check: a contiguous buffer, a `set`'s dtype) and
do nothing (memsets do nothing), a `drv.Stream()` has PyCUDA's stream methods around a
stream of the bound runtime (all done at once), and every read back (`memcpy_dtoh`,
`from_device(_like)`, `GPUArray.get`, an event's time) is a read of a discarded buffer,
refused or warned about by the bound runtime's policy. What a stand-in cannot honestly do
raises `PyCudaError` naming the call; what they lack (an attribute, a name imported from
one, a submodule: `warmcli.pycuda.lacking`) is named as theirs. `SourceModule` is warm's;
`StandInAllocation` lives in `warmcli.pycuda.args` (an argument like any other there). No
state.
"""

from __future__ import annotations

import math
import types
from collections.abc import Sequence
from typing import Any

import numpy as np

from warmcli.backends.base import DeviceError
from warmcli.config import pycuda_nvcc_flags
from warmcli.execution.process_mode import current_process_mode
from warmcli.pool_tasks import note_refused
from warmcli.pycuda import context, standin_vec
from warmcli.pycuda.args import In, InOut, Out, StandInAllocation
from warmcli.pycuda.lacking import LACKING, lacking, stand_in_module
from warmcli.pycuda.module import PyCudaError, SourceModule
from warmcli.pycuda.standin_device import (
    PointerHolderBase,
    _Context,
    _Device,
    ctx_flags,
    get_driver_version,
    get_version,
)


def _read(what: str) -> None:
    """A read back: the bound runtime's discarded-read policy; no GPU to read from."""
    if not current_process_mode().discards:  # (made in a pool's task: noted, as `no_gpu`)
        raise note_refused(DeviceError(f"cannot read back {what}: compile-only, there is no GPU"))
    context.current_runtime().refuse_discarded_read(what, stacklevel=3)


def _shape(shape: int | Sequence[int]) -> tuple[int, ...]:
    """PyCUDA's `GPUArray` allocates size × itemsize bytes with `mem_alloc`, whose size_t
    takes an int: a float size (`n / 2`) fails there, so here (never truncated). A 0-d
    array is its one size, as PyCUDA's."""
    shape = shape.item() if isinstance(shape, np.ndarray) and shape.ndim == 0 else shape
    dims = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    if not all(isinstance(d, int | np.integer) for d in dims):
        raise PyCudaError(
            f"GPUArray({shape!r}): PyCUDA's allocates its bytes with mem_alloc, which takes an "
            "int: a float size fails there: pass int sizes (n // 2)"
        )
    return tuple(int(d) for d in dims)


class GPUArray:
    """A shape-only `pycuda.gpuarray.GPUArray`: PyCUDA's shape operations (`reshape`,
    `ravel`, `view`, `transpose`, indexing and slicing) give shape-only arrays of its memory;
    its `flags` are its layout's."""

    def __init__(
        self,
        shape: int | Sequence[int],
        dtype: Any,  # no default, as PyCUDA's (`gpuarray.empty` is `GPUArray`; `zeros` has one)
        allocator: Any = None,
        base: Any = None,
        gpudata: Any = None,
        strides: Sequence[int] | None = None,
        order: str = "C",
        **_: Any,
    ) -> None:
        self.shape = _shape(shape)
        self.dtype = np.dtype(dtype)
        self.size = math.prod(self.shape)
        self.nbytes = self.size * self.dtype.itemsize
        if strides is None:  # C order's (or Fortran's), as PyCUDA's
            strides = _strides(self.shape, self.dtype.itemsize, order)
        self.strides = tuple(int(s) for s in strides)
        self.base = base
        self.gpudata = gpudata if gpudata is not None else StandInAllocation(self.nbytes)

    ndim = property(lambda self: len(self.shape))
    itemsize = property(lambda self: self.dtype.itemsize)
    mem_size = property(lambda self: self.size)
    ptr = property(lambda self: int(self.gpudata))  # PyCUDA's is an int (null here)
    flags = property(lambda self: _layout(self).flags)  # c_contiguous, f_contiguous, forc

    def __len__(self) -> int:
        return self.shape[0]

    def _like(self, view: np.ndarray) -> GPUArray:  # a view of its memory, as PyCUDA's
        return GPUArray(view.shape, view.dtype, base=self, strides=view.strides)

    def reshape(self, *shape: Any, order: str = "C") -> GPUArray:
        wanted = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        try:
            return self._like(_layout(self).reshape(wanted, order=order))
        except ValueError as exc:
            raise PyCudaError(f"GPUArray.reshape{shape}: {exc}") from None

    def ravel(self) -> GPUArray:
        return self.reshape(self.size)

    def view(self, dtype: Any = None) -> GPUArray:
        try:
            return self._like(_layout(self).view(dtype or self.dtype))
        except (TypeError, ValueError) as exc:
            raise PyCudaError(f"GPUArray.view({dtype!r}): {exc}") from None

    def __getitem__(self, index: Any) -> GPUArray:
        return self._like(_layout(self)[index])

    def transpose(self, axes: Any = None) -> GPUArray:
        return self._like(_layout(self).transpose(axes))

    T = property(transpose)

    def copy(self) -> GPUArray:
        return GPUArray(self.shape, self.dtype)

    def set(self, ary: np.ndarray, **_: Any) -> None:
        """PyCUDA's: a numpy array (or scalar) of its size and dtype (else a ValueError)."""
        if not isinstance(ary, np.ndarray | np.generic):
            raise PyCudaError(f"GPUArray.set: a {type(ary).__name__}: PyCUDA's takes an array")
        if ary.size != self.size:
            raise PyCudaError(f"GPUArray.set: {ary.size} elements into {self.size}")
        if ary.dtype != self.dtype:
            raise PyCudaError(f"GPUArray.set: {ary.dtype} into {self.dtype}: PyCUDA's refuses it")

    set_async = set

    def get(self, ary: np.ndarray | None = None, **_: Any) -> np.ndarray:
        _read(f"GPUArray {self.dtype}[{'x'.join(map(str, self.shape))}].get()")
        return ary if ary is not None else np.zeros(self.shape, self.dtype)

    get_async = get

    def fill(self, value: Any, stream: Any = None) -> GPUArray:
        return self

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # (PyCUDA's has a CUDA Array Interface; a probe's default)
            raise AttributeError(f"GPUArray.{name}: {LACKING}" if "cuda_" in name else name)
        raise PyCudaError(f"GPUArray.{name}: {_NOT_WARMS}")


_NOT_WARMS = (
    "a GPU-less stand-in only has a shape (warm run --arch); elementwise and reduction "
    "kernels of pycuda.gpuarray are not warm's: run the script on a GPU (warm run --pycuda, "
    "without --arch)"
)
# PyCUDA's GPUArray operators, each an elementwise kernel PyCUDA compiles: named, not a
# bare `unsupported operand type(s)` (Python's operators skip `__getattr__`).
_OPERATORS = {
    **{f"__{n}__": s for n, s in (("add", "+"), ("sub", "-"), ("mul", "*"), ("truediv", "/"))},
    **{f"__{n}__": s for n, s in (("floordiv", "//"), ("mod", "%"), ("pow", "**"))},
    **{f"__{n}__": s for n, s in (("lt", "<"), ("le", "<="), ("gt", ">"), ("ge", ">="))},
    **{f"__{n}__": s for n, s in (("neg", "unary -"), ("pos", "unary +"), ("abs", "abs()"))},
}
for _name, _symbol in list(_OPERATORS.items())[:7]:  # reflected and in-place forms
    _OPERATORS[_name.replace("__", "__r", 1)] = _OPERATORS[_name.replace("__", "__i", 1)] = _symbol


def _operator(symbol: str) -> Any:
    def refused(self: GPUArray, *_: Any) -> Any:
        raise PyCudaError(f"GPUArray {symbol}: {_NOT_WARMS}")

    return refused


for _name, _symbol in _OPERATORS.items():
    setattr(GPUArray, _name, _operator(_symbol))


def _strides(shape: tuple[int, ...], itemsize: int, order: str) -> tuple[int, ...]:
    """A contiguous array's strides in C order (or Fortran's, `order="F"`)."""
    fortran = order.upper() == "F"
    dims = shape if fortran else shape[::-1]
    steps = [itemsize * math.prod(dims[:i]) for i in range(len(dims))]
    return tuple(steps) if fortran else tuple(reversed(steps))


def _layout(array: GPUArray) -> np.ndarray:
    """A numpy array of `array`'s shape, dtype and strides over one element of memory:
    numpy's shape arithmetic for the views, nothing read or written."""
    one = np.zeros(1, array.dtype)
    return np.lib.stride_tricks.as_strided(one, array.shape, array.strides, writeable=False)


def to_gpu(ary: np.ndarray, allocator: Any = None, **_: Any) -> GPUArray:
    if not isinstance(ary, np.ndarray | np.generic):  # PyCUDA's reads ary.shape, ary.dtype
        raise PyCudaError(f"to_gpu({type(ary).__name__}): PyCUDA's takes a numpy array")
    return GPUArray(ary.shape, ary.dtype)


def to_gpu_async(ary: np.ndarray, allocator: Any = None, stream: Any = None) -> GPUArray:
    return to_gpu(ary)


empty = GPUArray  # PyCUDA's: (shape, dtype, allocator, base, gpudata, strides, order)


def zeros(shape: Any, dtype: Any = np.float64, allocator: Any = None, order: str = "C") -> GPUArray:
    return GPUArray(shape, dtype, order=order)


def empty_like(other: Any, dtype: Any = None, order: str = "K") -> GPUArray:
    return GPUArray(other.shape, dtype or other.dtype, order="F" if order == "F" else "C")


def mem_alloc(nbytes: int) -> StandInAllocation:
    """PyCUDA's `mem_alloc(size_t)` under Boost.Python takes a Python int only, and
    cuMemAlloc no 0 bytes (CUDA_ERROR_INVALID_VALUE): anything else refused, as there."""
    if not isinstance(nbytes, int) or nbytes <= 0:
        raise PyCudaError(
            f"mem_alloc({nbytes!r}): PyCUDA's takes a Python int > 0 (a numpy integer or a "
            "float is a Boost.Python ArgumentError there, 0 bytes cuMemAlloc's invalid value): "
            "pass int(n)"
        )
    return StandInAllocation(nbytes)


def mem_alloc_like(ary: np.ndarray) -> StandInAllocation:
    return mem_alloc(np.asarray(ary).nbytes)


to_device = mem_alloc_like  # (PyCUDA's copies too: nothing to copy here)


def memcpy_htod(dest: Any, src: np.ndarray, *_: Any) -> None:
    try:  # PyCUDA's reads src's buffer, any-contiguous
        nbytes = memoryview(src).nbytes if memoryview(src).contiguous else -1
    except TypeError:
        nbytes = -1
    if nbytes < 0:
        raise PyCudaError(f"memcpy_htod: a {type(src).__name__} is no contiguous buffer")
    size = getattr(dest, "nbytes", None)
    if size is not None and nbytes > size:
        raise PyCudaError(f"memcpy_htod: {nbytes} bytes into {size}")


def memcpy_dtod(dest: Any, src: Any, size: int, *_: Any) -> None:
    for memory in (dest, src):
        known = getattr(memory, "nbytes", None)
        if known is not None and int(size) > known:
            raise PyCudaError(f"memcpy_dtod: {int(size)} bytes of a {known}-byte allocation")


def memcpy_dtoh(dest: np.ndarray, src: Any, *_: Any) -> None:
    _read(f"memcpy_dtoh of {np.asarray(dest).nbytes} bytes")


def from_device(src: Any, shape: Any, dtype: Any, order: str = "C", what: str = "") -> Any:
    result = np.zeros(shape, dtype, order=order)  # type: ignore[call-overload]
    _read(f"{what or 'from_device'} of {result.nbytes} bytes")
    return result


def _no_op(*_: Any, **__: Any) -> None:
    return None


class Stream:
    """`drv.Stream()`: PyCUDA's stream API around a stream of the bound runtime, which its
    launches go out on (`__warm_stream__`); nothing runs, so all is done at once."""

    handle = 0

    def __init__(self, flags: int = 0) -> None:
        self.__warm_stream__ = context.current_runtime().stream()

    def synchronize(self) -> None:
        self.__warm_stream__.synchronize()

    def is_done(self) -> bool:
        return True

    wait_for_event = _no_op

    def __getattr__(self, name: str) -> Any:
        return lacking("pycuda.driver.Stream", name)


class Event:
    """`drv.Event()`: records nothing; its time is a read back."""

    __init__ = _no_op  # (flags: int = 0)

    def record(self, stream: Any = None) -> Event:
        return self

    def synchronize(self) -> Event:
        return self

    def query(self) -> bool:
        return True

    def time_till(self, end: Event) -> float:
        _read("an event time")
        return 0.0

    def time_since(self, start: Event) -> float:
        return start.time_till(self)


def modules() -> dict[str, types.ModuleType]:
    """The stand-in modules by the names a PyCUDA script imports."""
    package = stand_in_module("pycuda")
    package.__path__ = []  # a package: `import pycuda.driver` looks in sys.modules
    package.__warm_stand_in__ = True  # type: ignore[attr-defined]  (`pycuda_stands_in`)
    driver = stand_in_module(
        "pycuda.driver",
        In=In,
        Out=Out,
        InOut=InOut,
        DeviceAllocation=StandInAllocation,
        Error=DeviceError,
        init=_no_op,
        Device=_Device,
        Context=_Context,
        ctx_flags=ctx_flags,
        PointerHolderBase=PointerHolderBase,
        get_version=get_version,
        get_driver_version=get_driver_version,
        Stream=Stream,
        Event=Event,
        mem_alloc=mem_alloc,
        mem_alloc_like=mem_alloc_like,
        to_device=to_device,
        memcpy_htod=memcpy_htod,
        memcpy_htod_async=memcpy_htod,
        memcpy_dtoh=memcpy_dtoh,
        memcpy_dtoh_async=memcpy_dtoh,
        from_device=from_device,
        from_device_like=lambda src, a: from_device(src, a.shape, a.dtype, what="from_device_like"),
        memcpy_dtod=memcpy_dtod,
        memcpy_dtod_async=memcpy_dtod,
        **{f"memset_d{bits}{form}": _no_op for bits in (8, 16, 32) for form in ("", "_async")},
        pagelocked_empty=lambda shape, dtype, *a, **k: np.empty(shape, dtype),
        pagelocked_zeros=lambda shape, dtype, *a, **k: np.zeros(shape, dtype),
        pagelocked_empty_like=lambda ary, *a, **k: np.empty_like(ary),
        pagelocked_zeros_like=lambda ary, *a, **k: np.zeros_like(ary),
    )
    gpuarray = stand_in_module(
        "pycuda.gpuarray",
        GPUArray=GPUArray,
        to_gpu=to_gpu,
        to_gpu_async=to_gpu_async,
        empty=empty,
        zeros=zeros,
        empty_like=empty_like,
        zeros_like=empty_like,
        vec=standin_vec.vec,
    )
    characterize = stand_in_module(
        "pycuda.characterize",
        platform_bits=standin_vec.platform_bits,
        has_double_support=standin_vec.has_double_support,
        has_stack=standin_vec.has_stack,
    )
    flags = {"DEFAULT_NVCC_FLAGS": pycuda_nvcc_flags()}  # options=None's, as PyCUDA's
    compiler = stand_in_module("pycuda.compiler", SourceModule=SourceModule, **flags)
    autoinit = stand_in_module("pycuda.autoinit", device=_Device(), context=_Context())
    primary = stand_in_module("pycuda.autoprimaryctx", device=_Device(), context=_Context())
    found = {"driver": driver, "gpuarray": gpuarray, "compiler": compiler}
    found.update(characterize=characterize, autoinit=autoinit, autoprimaryctx=primary)
    for name, module in found.items():
        setattr(package, name, module)
    return {"pycuda": package, **{f"pycuda.{name}": module for name, module in found.items()}}
