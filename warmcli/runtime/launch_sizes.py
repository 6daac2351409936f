"""A buffer's shape and dtype, and a launch's grid, block and shared size, as given.

A shape is integer sizes >= 0 (Python's or numpy's; a bool is no size), a dtype one a
kernel reads as numbers (`numeric_dtype`), a grid and a block 1 to 3 positive integer
sizes, a shared size a number of bytes; anything else is a `ValueError` saying what is
taken (and a CUDA launch's sizes past what any GPU takes without an opt-in warm never
makes, `check_cuda_limits`). Its only state is a bounded memo of launch configurations
(`_CONFIGS`); it never allocates nor launches.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from warmcli.backends.base import LaunchConfig, dtype_name


def _sizes(value: Any) -> tuple[int, ...] | None:
    """An integer (a Python or numpy one) or a sequence of them as a tuple; None if not."""
    try:
        return (operator.index(value),)
    except TypeError:
        pass
    try:
        return tuple(map(operator.index, value))
    except TypeError:
        return None


def _dim3(value: int | Sequence[int]) -> tuple[int, int, int]:
    dims = _sizes(value)
    if dims is None or not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise ValueError(f"grid and block take 1 to 3 positive integer sizes, not {value!r}")
    return (*dims, *(1,) * (3 - len(dims)))  # type: ignore[return-value]


def _shared(value: int) -> int:
    try:
        shared = operator.index(value)
    except TypeError:
        shared = -1
    if shared < 0:
        raise ValueError(f"shared takes a number of bytes, an integer >= 0, not {value!r}")
    return shared


def buffer_shape(value: int | Sequence[int]) -> tuple[int, ...]:
    dims = _sizes(value)
    bools = isinstance(value, bool) or (
        isinstance(value, tuple | list) and any(isinstance(d, bool) for d in value)
    )  # a bool is an int to `operator.index`, but no size (numpy's has no index)
    if dims is None or any(d < 0 for d in dims) or bools:
        raise ValueError(f"a buffer's shape takes integer sizes >= 0, not {value!r}")
    return dims


def numeric_dtype(dtype: Any) -> str:
    """The name of `dtype` when a buffer may hold it (bool, integers, floats, complex);
    `ValueError` naming it otherwise: objects, strings, bytes, records and dates hold
    nothing a kernel can read as numbers (a kernel launched on objects crashes); a record's
    message says how to pass a C struct."""
    try:
        found = np.dtype(dtype)
    except TypeError:
        raise ValueError(f"buffer dtype {dtype!r} is not a numpy dtype") from None
    if found.kind not in "biufc":
        shown = f"record {found}" if found.names else found.name  # (a record's name: void64)
        bits = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}.get(found.itemsize)
        hint = (  # bytes of no numpy number (ml_dtypes' bfloat16, float8): as their bits
            f"; upload its bits, x.view(np.{bits}), and read them so in the kernel"
            if found.kind == "V" and not found.names and bits
            else ""
        )
        if found.names:  # a C struct's array: its bytes, the kernel taking a struct pointer
            hint = ("; upload its bytes, x.view(np.uint8), and declare the kernel's parameter "
                    "a pointer to the struct (a dtype made with align=True lays its fields "
                    "out as C does)")  # fmt: skip
        raise ValueError(
            f"buffer dtype {shown} is not numeric: a kernel reads a buffer's elements "
            f"as numbers (bool, integers, floats or complex){hint}"
        )
    return dtype_name(found)


_CONFIGS: dict[tuple[Any, Any, Any], LaunchConfig] = {}
_MAX_CONFIGS = 4096


def launch_config(
    grid: int | Sequence[int], block: int | Sequence[int], shared: int
) -> LaunchConfig:
    """The launch's configuration, made once per distinct (grid, block, shared) given."""
    try:
        return _CONFIGS[(grid, block, shared)]
    except KeyError:
        config = LaunchConfig(_dim3(grid), _dim3(block), _shared(shared))
        if len(_CONFIGS) < _MAX_CONFIGS:
            _CONFIGS[(grid, block, shared)] = config
        return config
    except TypeError:  # a list is not hashable: nothing to remember it by
        return LaunchConfig(_dim3(grid), _dim3(block), _shared(shared))


MAX_DYNAMIC_SHARED = 48 * 1024  # bytes a launch's dynamic shared memory takes, no opt-in


def check_cuda_limits(config: LaunchConfig) -> None:
    """`ValueError` for a CUDA launch no GPU takes (every compute capability since 3.0):
    over 1,024 threads a block, a block's x or y over 1,024 or its z over 64, a grid's x
    over 2**31 - 1 or its y or z over 65,535, dynamic shared memory over 48 KiB (more takes
    the function's opt-in, `cuFuncSetAttribute`, which warm never makes) (a pre-build without
    a GPU says so, as the GPU would at production's first launch)."""
    (gx, gy, gz), (bx, by, bz) = config.grid, config.block
    threads = bx * by * bz
    limits = (
        ("block x", bx, 1024),
        ("block y", by, 1024),
        ("block z", bz, 64),
        ("grid x", gx, 2**31 - 1),
        ("grid y", gy, 65535),
        ("grid z", gz, 65535),
    )
    problems = [f"{threads} threads a block (at most 1024)" if threads > 1024 else ""]
    problems += [f"{name} {size} (at most {most})" for name, size, most in limits if size > most]
    if config.shared > MAX_DYNAMIC_SHARED:
        problems.append(
            f"dynamic shared memory {config.shared} bytes (at most {MAX_DYNAMIC_SHARED})"
        )
    if any(problems):
        shown = "; ".join(p for p in problems if p)
        raise ValueError(
            f"no GPU launches grid {config.grid}, block {config.block}, shared "
            f"{config.shared}: {shown}"
        )
