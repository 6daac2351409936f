"""The GPU-less stand-ins' `pycuda.gpuarray.vec` and `pycuda.characterize`: host-side answers.

`vec` holds PyCUDA's CUDA vector types as numpy dtypes (`vec.float4`: fields x, y, z, w of
float32; char to double, 1 to 4 fields, longlong and double 1 or 2) and their makers
(`vec.make_float4(1, 2, 3, 4)`, its fields by position or name: a 0-d array of that
dtype), as `pycuda/gpuarray.py` builds them (a 64-bit platform's `long`: 8 bytes).
`characterize`'s questions a compute capability answers (`has_double_support`, `has_stack`)
are answered from the compile-only device's arch, `platform_bits` from the host; `sizeof`,
which launches a kernel and reads its result, is not held (named as the stand-in's lack).
No state.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

_FIELDS = "xyzw"
_TYPES: tuple[tuple[str, Any, tuple[int, ...]], ...] = (  # pycuda/gpuarray.py's, 64-bit
    ("char", np.int8, (1, 2, 3, 4)),
    ("uchar", np.uint8, (1, 2, 3, 4)),
    ("short", np.int16, (1, 2, 3, 4)),
    ("ushort", np.uint16, (1, 2, 3, 4)),
    ("int", np.int32, (1, 2, 3, 4)),
    ("uint", np.uint32, (1, 2, 3, 4)),
    ("long", np.int64, (1, 2, 3, 4)),
    ("ulong", np.uint64, (1, 2, 3, 4)),
    ("longlong", np.int64, (1, 2)),
    ("ulonglong", np.uint64, (1, 2)),
    ("float", np.float32, (1, 2, 3, 4)),
    ("double", np.float64, (1, 2)),
)


class vec:
    """`pycuda.gpuarray.vec`: each vector type's dtype, and its `make_` function."""


def _maker(name: str, dtype: np.dtype[Any]) -> Callable[..., np.ndarray]:
    fields = dtype.names or ()
    signature = inspect.Signature(  # PyCUDA's is `lambda x, y, z, w: ...`: named or not
        [inspect.Parameter(f, inspect.Parameter.POSITIONAL_OR_KEYWORD) for f in fields]
    )

    def make(*values: Any, **named: Any) -> np.ndarray:
        try:
            given = signature.bind(*values, **named).arguments
        except TypeError as exc:
            raise TypeError(f"make_{name}(): {exc}") from None
        return np.array(tuple(given[f] for f in fields), dtype=dtype)

    make.__name__ = f"make_{name}"
    make.__signature__ = signature  # type: ignore[attr-defined]
    return make


for _base, _type, _counts in _TYPES:
    for _count in _counts:
        _dtype = np.dtype([(_FIELDS[i], _type) for i in range(_count)])
        setattr(vec, f"{_base}{_count}", _dtype)
        setattr(vec, f"make_{_base}{_count}", staticmethod(_maker(f"{_base}{_count}", _dtype)))


def platform_bits() -> int:
    return 64 if sys.maxsize > 2**32 else 32


def _capability() -> tuple[int, int]:
    from warmcli.pycuda.standin_device import _Device  # (what `Context.get_device()` gives)

    return _Device().compute_capability()


def has_double_support() -> bool:
    return _capability() >= (1, 3)


def has_stack() -> bool:
    return _capability() >= (2, 0)
