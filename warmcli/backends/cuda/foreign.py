"""Device memory the caller already owns, as a warm `Buffer`: the foreign-array core.

PyCUDA's `DeviceAllocation`, `GPUArray` and `PointerHolderBase`, its managed arrays (numpy
arrays over a `ManagedAllocation`, `drv.managed_empty`'s: passed by that allocation's
pointer, as PyCUDA's call passes them), anything with `__cuda_array_interface__` (CuPy,
PyTorch, Numba arrays) and warm's own GPU-less stand-ins become a `Buffer` whose handle is
the device pointer (`wrap`; `Runtime.wrap` and `warmcli.pycuda.args` use it); an array of
records (PyCUDA's `vec.float4`s) is one of its numbers or bytes (`numbers_of`; a staged host
array's, `held_view`). Foreign classes are recognised by name, so neither pycuda nor any
array library is imported here; this module holds no state and never touches a device.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from warmcli.backends.base import Buffer
from warmcli.errors import ArgumentError as ArgumentError  # re-exported: its home is errors


def _class_names(obj: Any) -> set[str]:
    return {cls.__name__ for cls in type(obj).__mro__}


def _pointer(value: Any) -> int | None:
    """A device pointer as an int; None for none, or for a GPU-less stand-in's memory."""
    if value is None or type(value).__name__ == "StandInAllocation":
        return None
    return int(value)


def _refuse_gaps(obj: Any, shape: Any, strides: Any, dtype: Any) -> None:
    """`ArgumentError` for a view whose elements are not one C-ordered run of memory (a
    slice with a step, a transposed or column-sliced array): a `Buffer` is shape x itemsize
    bytes from its pointer, so warm's reads and a tune's restore of its inputs would miss
    (or overwrite) the memory between its rows. No strides, or C order's, pass; so does a
    view of no elements, and any stride of a dimension of one (as numpy judges it). Asked
    of every array argument of every launch: C order is seen without a conversion (0.6 µs,
    not 2.3 µs, for a 2-D GPUArray); anything else is judged below, and named."""
    if strides is None:
        return
    expected = dtype.itemsize if isinstance(dtype, np.dtype) else np.dtype(dtype).itemsize
    if len(strides) == len(shape):
        for i in range(len(shape) - 1, -1, -1):
            if shape[i] != 1 and strides[i] != expected:
                break
            expected *= shape[i]
        else:
            return  # C order
    dims, steps = tuple(int(n) for n in shape), tuple(int(s) for s in strides)
    if 0 in dims:
        return
    expected = np.dtype(dtype).itemsize
    for n, step in zip(reversed(dims), reversed(steps), strict=False):
        if n != 1 and step != expected:
            raise ArgumentError(
                f"cannot pass a {type(obj).__name__} view that is not contiguous (shape "
                f"{dims}, strides {steps}) as device memory: pass a contiguous copy"
            )
        expected *= n
    if len(steps) != len(dims):
        raise ArgumentError(f"a {type(obj).__name__}'s strides {steps} do not match its shape")


def numbers_of(shape: Sequence[int], dtype: Any) -> tuple[tuple[int, ...], str]:
    """Foreign memory's shape and dtype as a `Buffer` holds them: a numeric dtype's as they
    are; a record's (PyCUDA's `vec.float4`, a struct) as its fields' numbers where all are
    one type with no padding (float4[n]: float32[n, 4]), else as its bytes (uint8[n, size])."""
    found = np.dtype(dtype)
    dims = tuple(int(n) for n in shape)
    if found.kind in "biufc":
        return dims, found.name
    fields = [found.fields[name][0] for name in found.names or ()]  # type: ignore[index]
    one = fields[0] if fields and all(f == fields[0] for f in fields) else None
    if one is not None and one.kind in "biufc" and one.itemsize * len(fields) == found.itemsize:
        return (*dims, len(fields)), one.name
    return (*dims, found.itemsize), "uint8"


def held_view(array: np.ndarray) -> np.ndarray:
    """A contiguous host array (a `drv.In`/`Out`'s) flat, its bytes as they lie (C or
    Fortran order, as PyCUDA's copies take them), viewed as a `Buffer` holds them: an array
    of records as its numbers or bytes (`numbers_of`: padding included). A view: what is
    written into it lands in `array`. An array of objects holds no bytes to copy (PyCUDA's
    copy refuses it too): `ArgumentError`."""
    flat = array.reshape(-1, order="A")
    if flat.dtype.kind == "O":
        raise ArgumentError("an array of Python objects holds no bytes to copy to a device")
    if flat.dtype.kind in "biufc":
        return flat
    shape, dtype = numbers_of(flat.shape, flat.dtype)
    return flat.view(dtype).reshape(shape)


def managed(obj: Any) -> bool:
    """Whether `obj` is a PyCUDA managed array: a numpy array whose base is the
    `ManagedAllocation` it lies in (as PyCUDA's call tells one; a view of it is not)."""
    return isinstance(obj, np.ndarray) and "ManagedAllocation" in _class_names(obj.base)


def wrap(
    obj: Any,
    device_id: str,
    shape: Sequence[int] | None = None,
    dtype: str | None = None,
) -> Buffer:
    """Device memory the caller already owns, as a warm `Buffer` (its pointer as handle).

    Takes a `Buffer` (as is), a `GPUArray`, anything with `__cuda_array_interface__`, a
    managed array, a `DeviceAllocation` (bytes unless `shape`/`dtype` say otherwise), a
    `PointerHolderBase` (its `.gpudata`, PyCUDA's call's, else its `get_pointer()`) or
    warm's shape-only stand-ins. Raises `ArgumentError` for anything else, and for a
    view that is not contiguous (`_refuse_gaps`).
    """
    if isinstance(obj, Buffer):
        return obj
    interface = getattr(obj, "__cuda_array_interface__", None)
    if isinstance(interface, dict):
        data = interface.get("data") or (None,)
        _refuse_gaps(obj, interface["shape"], interface.get("strides"), interface["typestr"])
        found = numbers_of(interface["shape"], interface["typestr"])  # a record's: "|V16"
        return Buffer(device_id, shape or found[0], dtype or found[1], _pointer(data[0]))
    if "PointerHolderBase" in _class_names(obj):  # PyCUDA's: its .gpudata (a call's), else
        pointer = _pointer(getattr(obj, "gpudata", obj))  # get_pointer() (a prepared call's)
        return Buffer(device_id, shape or (0,), dtype or "uint8", pointer)
    if hasattr(obj, "gpudata") and hasattr(obj, "shape") and hasattr(obj, "dtype"):
        _refuse_gaps(obj, obj.shape, getattr(obj, "strides", None), obj.dtype)
        pointer = getattr(obj, "ptr", None)
        if pointer is None or _pointer(obj.gpudata) is None:  # a stand-in's: null, not 0
            pointer = obj.gpudata
        found = numbers_of(obj.shape, obj.dtype)
        return Buffer(device_id, shape or found[0], dtype or found[1], _pointer(pointer))
    if managed(obj):  # all its bytes as they lie (C or Fortran order), from its allocation's start
        if not (obj.flags.c_contiguous or obj.flags.f_contiguous):
            raise ArgumentError(f"a managed array of strides {obj.strides} is not contiguous")
        found = numbers_of((obj.size,), obj.dtype)
        return Buffer(device_id, shape or found[0], dtype or found[1], _pointer(obj.base))
    names = _class_names(obj)
    if names & {"DeviceAllocation", "PooledDeviceAllocation", "StandInAllocation"}:
        nbytes = getattr(obj, "nbytes", None)
        if shape is None:
            shape = (int(nbytes),) if nbytes is not None else (0,)
        return Buffer(device_id, shape, dtype or "uint8", _pointer(obj))
    raise ArgumentError(
        f"cannot pass a {type(obj).__name__} as device memory: a Buffer, DeviceAllocation, "
        "GPUArray or an object with __cuda_array_interface__ is needed (a numpy array: "
        "drv.In/Out/InOut, or rt.upload)"
    )
