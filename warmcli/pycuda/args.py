"""Launch arguments in PyCUDA's terms, turned into what a warm launch takes.

PyCUDA code passes device memory as `DeviceAllocation`s, `GPUArray`s, anything with
`__cuda_array_interface__` (CuPy, PyTorch, Numba arrays), managed arrays (`drv.managed_empty`'s,
by their allocation's pointer, as PyCUDA's call) and `drv.In`/`Out`/`InOut` around numpy arrays
(contiguous in C or Fortran order, as PyCUDA's copies take them), and scalars as numpy scalars
(or 0-d arrays, taken as the scalar they hold, whose bytes PyCUDA packs). This layer turns each
into a warm `Buffer` (device memory of a shape and dtype, its pointer as the handle) or a numpy
scalar of the parameter's warm letter, before warm's own launch sees it; `wrap` (from
`warmcli.backends.cuda.foreign`, re-exported here) is the same for one object (`Runtime.wrap`).
PyCUDA's letters are warm's (each checked against the kernel's declaration; a call's 8-byte
numpy integer for a pointer, `np.uintp(ptr)`, is that address, as PyCUDA packs it). What
PyCUDA's launch refuses is refused here, named: a Python number or a `np.bool_` in a call
(`check_call_arg`: PyCUDA's call packs `np.number`s only), and in a prepared call an address
`struct.pack` cannot take (a GPUArray, a `drv.In`, a PyTorch tensor: it takes what
`operator.index` takes, an int or a DeviceAllocation) or a float or `np.bool_` for an integer
letter. A struct passed by value (a numpy structured scalar, PyCUDA's `%ds`) is refused, named,
as is a text or a complex number for a scalar parameter (never converted); `prepare_letters` is
`prepare`'s reading of its types (`np.bool_`, which PyCUDA's reads as `np.uintp`, refused).
PyCUDA's own classes are recognised by name, so pycuda is never imported here; this module holds
no state and never touches a device.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from warmcli.backends.base import Buffer
from warmcli.backends.cuda.foreign import (  # ArgumentError: re-exported
    ArgumentError,
    _class_names,
    managed,
    numbers_of,
    wrap,
)
from warmcli.errors import PyCudaError

# PyCUDA (struct/numpy) letters -> warm's parameter letters: the same letters, since warm
# checks each one against the kernel's declaration (an unsigned or bool parameter must
# keep its own letter, or its kernel would fail that check).
WARM_LETTER = {c: c for c in "P?bBhHiIlLqQfd"}
_UNSIGNED = {"B": np.uint8, "?": np.uint8, "H": np.uint16, "I": np.uint32, "L": np.uint64}
_UNSIGNED["Q"] = np.uint64
_SIGNED = {"b": np.int8, "h": np.int16, "i": np.int32, "l": np.int64, "q": np.int64}
_SIGNED.update(f=np.float32, d=np.float64)  # type: ignore[arg-type]


class ArgumentHandler:
    """A numpy array copied to the device for one launch (PyCUDA's `drv.In` family)."""

    copies_in = False
    copies_out = False

    def __init__(self, array: np.ndarray) -> None:
        self.array = array


class In(ArgumentHandler):
    """Copied to the device before the launch."""

    copies_in = True


class Out(ArgumentHandler):
    """Copied back into the array after the launch."""

    copies_out = True


class InOut(In, Out):
    """Copied in before and back after the launch."""

    copies_in = True
    copies_out = True


class StandInAllocation:
    """Device memory of a size, with nothing behind it (its pointer is null)."""

    handle = None

    def __init__(self, nbytes: int) -> None:
        self.nbytes = int(nbytes)

    def free(self) -> None:
        return None

    def __int__(self) -> int:
        return 0  # null: nothing is ever launched or copied on a compile-only device

    __index__ = __int__

    def __repr__(self) -> str:
        return f"StandInAllocation({self.nbytes} bytes)"


@dataclass(frozen=True)
class Staged:
    """A `drv.In`/`Out`/`InOut` argument: which way it copies, and its array."""

    array: np.ndarray
    copies_in: bool
    copies_out: bool

    @property
    def label(self) -> str:
        kind = "InOut" if self.copies_in and self.copies_out else "Out" if self.copies_out else "In"
        return f"drv.{kind}({self.array.dtype}[{'x'.join(map(str, self.array.shape))}])"


def staged(obj: Any) -> Staged | None:
    """`obj` as a copy-in/copy-out argument (warm's or PyCUDA's `In`/`Out`/`InOut`), or None."""
    names = _class_names(obj)
    if "ArgumentHandler" not in names or not hasattr(obj, "array"):
        return None
    array = obj.array
    if not isinstance(array, np.ndarray):
        raise ArgumentError(f"{type(obj).__name__} wraps a {type(array).__name__}: a numpy array")
    copies_in = bool(getattr(obj, "copies_in", "In" in names))
    copies_out = bool(getattr(obj, "copies_out", "Out" in names))
    # PyCUDA's copies take any contiguous buffer (C or Fortran order: its bytes as they lie)
    contiguous = array.flags.c_contiguous or array.flags.f_contiguous
    if not contiguous or (copies_out and not array.flags.writeable):
        raise ArgumentError(
            f"{type(obj).__name__} needs a contiguous{' writable' if copies_out else ''} array "
            "(C or Fortran order, as PyCUDA's copies do)"
        )
    if not array.nbytes:  # PyCUDA's mem_alloc_like(array): cuMemAlloc refuses 0 bytes
        raise ArgumentError(
            f"{type(obj).__name__} of an empty array: PyCUDA allocates its device copy with "
            "mem_alloc, which refuses 0 bytes (CUDA_ERROR_INVALID_VALUE): skip the launch"
        )
    if not array.dtype.isnative:  # its bytes copied as they are: a kernel reads them swapped
        raise ArgumentError(
            f"{type(obj).__name__} needs an array in this machine's byte order, not "
            f"{array.dtype.str} (the kernel would read its bytes swapped): pass "
            f"a.astype({array.dtype.newbyteorder('=').str!r})"
        )
    return Staged(array, copies_in, copies_out)


def scalar(value: Any, letter: str, position: int) -> np.generic:
    """`value` as the numpy scalar of PyCUDA letter `letter` (out of its range, or a float
    for an integer letter, as `struct.pack` refuses it: refused, never truncated). A text
    or a complex number is no such value, and a numpy structured scalar is a struct by
    value, which warm does not pass: each refused, never converted."""
    if isinstance(value, np.void):
        raise ArgumentError(f"argument {position}: {STRUCT_BY_VALUE}")
    if isinstance(value, str | bytes | complex | np.complexfloating):
        kind = "number" if isinstance(value, str | bytes) else "real number"
        raise ArgumentError(
            f"argument {position}: {value!r} ({type(value).__name__}) is no {kind}: a {letter!r} "
            "parameter takes an int or a float (PyCUDA's struct.pack refuses it)"
        )
    try:
        if letter == "?":
            return np.bool_(bool(value))
        if letter in "fd":
            return _SIGNED[letter](value)
        if not hasattr(type(value), "__index__"):  # struct.pack's integers: a float, np.bool_
            raise TypeError(f"a {type(value).__name__} is no integer (struct.pack refuses it)")
        if letter in _UNSIGNED:
            return np.array(operator.index(value), dtype=_UNSIGNED[letter])[()]
        return _SIGNED[letter](operator.index(value))  # (out of its range: OverflowError)
    except (TypeError, ValueError, OverflowError) as exc:
        message = f"argument {position}: {value!r} is no {letter!r} value: {exc}"
        raise ArgumentError(message) from None


STRUCT_BY_VALUE = (
    "a struct passed by value (a numpy structured scalar), which warm does not pass: its "
    "kernels take pointers and numbers only: pass the fields as parameters of their own, "
    "or the struct in device memory as a pointer"
)


BOOL_TYPE = (
    "np.bool_ is no np.number, so PyCUDA's prepare packs it as a pointer-sized integer "
    "(np.uintp's 'L', eight bytes), which a bool parameter does not read: pass "
    "np.dtype(np.bool_) or the letter '?'"
)


def prepare_letters(arg_types: str | Sequence[Any], entry: str) -> str:
    """PyCUDA's `prepare` letters for `arg_types` (a string, or numpy types), as PyCUDA
    makes them (a structured dtype, PyCUDA's `%ds`, is refused: see `STRUCT_BY_VALUE`)."""
    if isinstance(arg_types, str):
        letters = arg_types
    else:
        parts = []
        for t in arg_types:
            if isinstance(t, str):
                parts.append(t)
            elif t is np.bool_:  # no np.number: PyCUDA's prepare makes it np.uintp's letter
                raise PyCudaError(f"{entry}.prepare({arg_types!r}): {BOOL_TYPE}")
            elif isinstance(t, np.dtype) or (isinstance(t, type) and issubclass(t, np.generic)):
                if np.dtype(t).kind == "V":
                    raise PyCudaError(f"{entry}.prepare({arg_types!r}): {STRUCT_BY_VALUE}")
                parts.append(np.dtype(t).char)
            else:
                parts.append(np.dtype(np.uintp).char)
        letters = "".join(parts)
    bad = sorted(set(letters) - set(WARM_LETTER))
    if bad:
        raise PyCudaError(
            f"{entry}.prepare({arg_types!r}): warm passes the letters {''.join(WARM_LETTER)}, "
            f"not {bad}"
        )
    return letters


def held_scalar(value: Any) -> Any:
    """A 0-d numpy array as the numpy scalar it holds (PyCUDA packs its bytes, which are
    that scalar's); any other value as it is."""
    return value[()] if isinstance(value, np.ndarray) and value.ndim == 0 else value


def call_letter(value: Any, position: int) -> str:
    """The letter PyCUDA's unprepared call gives an argument (its numpy type, or `P`)."""
    if isinstance(value, np.number | np.bool_):
        letter = value.dtype.char
        if letter not in WARM_LETTER:
            raise ArgumentError(f"argument {position}: a {value.dtype} scalar has no kernel letter")
        return letter
    check_call_arg(value, position)
    if isinstance(value, np.void):
        raise ArgumentError(f"argument {position}: {STRUCT_BY_VALUE}")
    if isinstance(value, np.ndarray) and not managed(value):  # (managed: passed, as PyCUDA's)
        raise ArgumentError(
            f"argument {position}: a numpy array is host memory: wrap it in drv.In/Out/InOut "
            "or copy it to the device"
        )
    return "P"


_PYTHON_NUMBERS = (bool, int, float, complex, np.bool_)


def call_args(args: Sequence[Any]) -> tuple[Any, ...]:
    """A call's arguments, each checked (`check_call_arg`), a 0-d array as its scalar."""
    found = []
    for position, value in enumerate(args, start=1):
        if not isinstance(value, np.number):
            check_call_arg(value, position)  # (a 0-d array is packed as its bytes)
            value = held_scalar(value)
        found.append(value)
    return tuple(found)


def check_call_arg(value: Any, position: int) -> None:
    """PyCUDA's call packs numpy numbers (`np.number`), not a Python number nor numpy's bool
    (no `np.number`): `TypeError: invalid type on parameter`, whatever the declaration."""
    if isinstance(value, np.number):  # (np.float64 is a float too: PyCUDA packs it)
        return
    if "PointerHolderBase" in _class_names(value) and not (
        hasattr(value, "gpudata") or hasattr(value, "__cuda_array_interface__")
    ):
        raise ArgumentError(
            f"argument {position}: a {type(value).__name__} (a PointerHolderBase) without "
            "a .gpudata: PyCUDA's call takes one by its .gpudata only (else TypeError: invalid "
            f"type on parameter #{position - 1} (0-based)): set .gpudata, or prepare()"
        )
    if isinstance(value, _PYTHON_NUMBERS):
        kind = "numpy bool" if isinstance(value, np.bool_) else f"Python {type(value).__name__}"
        shown = bool(value) if isinstance(value, bool | np.bool_) else value
        example = {bool: "np.array({!r})", float: "np.float32({!r})", complex: "np.complex64({!r})"}
        hint = example.get(type(shown), "np.int32({!r})").format(shown)
        raise ArgumentError(
            f"argument {position}: a {kind} has no C type: pass a numpy value ({hint}, of "
            "the parameter's type) as PyCUDA requires (its call raises TypeError: invalid "
            f"type on parameter #{position - 1} (0-based)), or prepare()"
        )


def check_letter(value: Any, letter: str, position: int, entry: str) -> None:
    """A numpy scalar passed where the kernel's declaration wants another type would be
    passed with the wrong bytes by PyCUDA: refused, naming both."""
    if not isinstance(value, np.number | np.bool_):
        return
    if value.dtype.char not in WARM_LETTER:  # complex, float16, long double: no C letter
        message = f"{entry} argument {position}: a {value.dtype} scalar has no kernel letter"
        raise ArgumentError(message)
    if letter == "P" and value.dtype.kind in "iu" and value.dtype.itemsize == 8:
        return  # `np.uintp(ptr)`: PyCUDA packs its 8 bytes, the address the kernel reads
    if letter == "P":
        raise ArgumentError(
            f"{entry} argument {position}: a {value.dtype} scalar for a pointer: PyCUDA packs "
            f"its {value.dtype.itemsize} bytes where the kernel reads an 8-byte address: pass "
            "the allocation, or its address as np.uintp"
        )
    if not same_bytes(value.dtype.char, letter):
        raise ArgumentError(
            f"{entry} argument {position}: a {value.dtype} scalar for a parameter declared "
            f"{np.dtype(_SIGNED.get(letter) or _UNSIGNED[letter]).name}"
        )


def same_bytes(given: str, declared: str) -> bool:
    """Whether a value of letter `given` is packed in the bytes a parameter of letter
    `declared` reads: the same width and kind (integer or float; signedness and bool aside)."""
    if "P" in (given, declared):
        return given == declared
    return _width(given) == _width(declared) and _kind(given) == _kind(declared)


def _width(letter: str) -> int:
    return np.dtype(_SIGNED.get(letter) or _UNSIGNED[letter]).itemsize


def _kind(letter: str) -> str:
    return "f" if letter in "fde" else "i"


def convert(
    letters: str, args: Sequence[Any], device_id: str, entry: str, packed: bool = False
) -> tuple[list[Any], dict[int, Staged]]:
    """Warm launch arguments for `args` under PyCUDA letters: buffers and numpy scalars,
    and the copy-in/copy-out arguments by position (their buffers are made at launch).
    `packed` (a prepared call): an address is what `struct.pack` takes, an int or an object
    with `__index__` (a DeviceAllocation), or a warm `Buffer`; a GPUArray, a CuPy array or a
    `drv.In` is refused there ("required argument is not an integer"), so here too."""
    if len(args) != len(letters):
        raise ArgumentError(
            f"{entry} takes {len(letters)} arguments ({letters!r}), got {len(args)}"
        )
    values: list[Any] = []
    handlers: dict[int, Staged] = {}
    for position, (letter, given) in enumerate(zip(letters, args, strict=True), start=1):
        arg = held_scalar(given)
        if packed and letter in "PlLqQ" and not _packable(arg):
            raise ArgumentError(
                f"{entry} argument {position}: a {type(arg).__name__} is no address: a "
                f"prepared call packs its {letter!r} with struct.pack, as PyCUDA does, which "
                "takes an int or a DeviceAllocation: pass its .gpudata (or int(...))"
            )
        handler = staged(arg)
        if handler is not None:
            if letter != "P":
                raise ArgumentError(f"{entry} argument {position}: {handler.label} for {letter!r}")
            handlers[position - 1] = handler
            held = numbers_of(handler.array.shape, handler.array.dtype)  # records: numbers
            values.append(Buffer(device_id, *held))
        elif letter == "P" and _is_number(arg):  # an address, as PyCUDA packs one: no size
            values.append(Buffer(device_id, (0,), "uint8", int(arg)))
        elif letter == "P":
            values.append(wrap(arg, device_id))
        elif letter in "lLqQ" and not isinstance(arg, int | float | np.generic):
            # prepare([np.intp, ...]) passes pointers as 64-bit integers, as PyCUDA packs them
            values.append(np.int64(wrap(arg, device_id).handle or 0))
        else:
            values.append(scalar(arg, letter, position))
    return values, handlers


def _packable(value: Any) -> bool:
    """An address `struct.pack` takes (or a number, which `scalar` judges; or warm's own):
    what `operator.index` takes, as struct.pack asks it; a PyTorch tensor's or CuPy array's
    `__index__` refuses an array of more than one element, so PyCUDA's pack fails there."""
    if isinstance(value, _PACKABLE):
        return True
    if not hasattr(type(value), "__index__"):
        return False
    try:
        operator.index(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


_PACKABLE = (Buffer, int, float, complex, str, bytes, np.generic)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def describe(value: Any) -> Any:
    """What of one argument keys a tune: arrays by dtype and shape, scalars by value."""
    value = held_scalar(value)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    handler = staged(value)
    if handler is not None:
        value = handler.array
    if isinstance(value, np.ndarray):
        return f"{value.dtype}[{'x'.join(map(str, value.shape))}]"
    try:
        buffer = wrap(value, "")
    except ArgumentError:
        return type(value).__name__
    return f"{buffer.dtype}[{'x'.join(map(str, buffer.shape))}]"
