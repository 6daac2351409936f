"""Launch arguments checked against the kernel's parameter letters, never guessed.

A converter is made once per kernel (and device) and then only called: it checks
the number of arguments, that a `P` gets a buffer of the device, that an integer
letter gets an integer in its width's range and a float letter a real number, and
turns each argument into what the backend passes (an address, a number). Any other
argument is a `LaunchError` naming the kernel, the argument's position, its letter
and what was given. The fast path of each argument is one type test and a range
test, so a launch stays cheap. This module holds no state and never launches.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from warmcli.backends.base import Buffer, LaunchError
from warmcli.kernel import PARAM_DESCRIPTIONS, PARAM_SCALARS, Kernel

Converter = Callable[[Sequence[Any]], tuple[Any, ...]]
Step = Callable[[Any], Any]

# Integer letters and their inclusive ranges; float letters and their largest finite value.
INT_RANGES: dict[str, tuple[int, int]] = {
    letter: (int(np.iinfo(t).min), int(np.iinfo(t).max))
    for letter, t in PARAM_SCALARS.items()
    if np.issubdtype(t, np.integer)
}
FLOAT_LIMITS: dict[str, float] = {
    letter: float(np.finfo(t).max)
    for letter, t in PARAM_SCALARS.items()
    if np.issubdtype(t, np.floating)
}


def _given(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return text if isinstance(value, Buffer) else f"{text} ({type(value).__name__})"


def argument_error(kernel: Kernel, position: int, expected: str, value: Any) -> LaunchError:
    letter = kernel.params[position]
    return LaunchError(
        f"kernel {kernel.label}: argument {position + 1} ('{letter}', "
        f"{PARAM_DESCRIPTIONS[letter]}) must be {expected}, got {_given(value)}"
    )


def count_error(kernel: Kernel, args: Sequence[Any]) -> LaunchError:
    return LaunchError(
        f"kernel {kernel.label} takes {len(kernel.params)} argument(s) "
        f"({kernel.params!r}), got {len(args)}"
    )


def _integer_step(kernel: Kernel, position: int) -> Step:
    lo, hi = INT_RANGES[kernel.params[position]]
    expected = f"an integer in [{lo}, {hi}]"

    def step(value: Any) -> Any:
        if type(value) is int and lo <= value <= hi:
            return value
        if isinstance(value, int | np.integer) and lo <= int(value) <= hi:
            return int(value)
        raise argument_error(kernel, position, expected, value)

    return step


def _float_step(kernel: Kernel, position: int) -> Step:
    limit = FLOAT_LIMITS[kernel.params[position]]
    expected = f"a real number within ±{limit:.6g}"

    def step(value: Any) -> Any:
        if type(value) is float and -limit <= value <= limit:
            return value
        if isinstance(value, float | int | np.floating | np.integer) and not isinstance(
            value, bool | np.bool_
        ):
            number = float(value)
            if -limit <= number <= limit or number != number or abs(number) == float("inf"):
                return number
        raise argument_error(kernel, position, expected, value)

    return step


def _bool_step(kernel: Kernel, position: int) -> Step:
    def step(value: Any) -> Any:
        if isinstance(value, bool | np.bool_):
            return bool(value)
        if isinstance(value, int | np.integer) and int(value) in (0, 1):
            return bool(value)
        raise argument_error(kernel, position, "True, False, 0 or 1", value)

    return step


def _pointer_step(kernel: Kernel, position: int, pointer: Step, device: str) -> Step:
    expected = f"a buffer on {device}"

    def step(value: Any) -> Any:
        address = pointer(value)
        if address is None:
            raise argument_error(kernel, position, expected, value)
        return address

    return step


def _step(kernel: Kernel, position: int, pointer: Step, device: str) -> Step:
    """The full check of one argument, by its letter: converts it or raises."""
    letter = kernel.params[position]
    if letter == "P":
        return _pointer_step(kernel, position, pointer, device)
    if letter in INT_RANGES:
        return _integer_step(kernel, position)
    if letter in FLOAT_LIMITS:
        return _float_step(kernel, position)
    return _bool_step(kernel, position)


def converter(
    kernel: Kernel,
    device: str,
    pointer: Step,
    finish: dict[str, Callable[[Any], Any]] | None = None,
    fast_buffer: tuple[type, str] | None = None,
) -> Converter:
    """The checking converter of `kernel`'s arguments for one device, made once.

    `pointer(value)` is the address a `P` argument passes, or None when `value` is no
    buffer of this device; `fast_buffer` = (type, attribute) lets a buffer of exactly
    that type pass its attribute without a call; `finish` maps a letter to a last
    conversion of its checked value (how the backend passes it). The converter is
    generated as one function with each argument's fast test inline (only letters,
    which are validated, go into its text); anything off the fast path goes through
    the full check of its letter (made on first use), which converts it or raises the
    `LaunchError`. A process serving thousands of kernels makes thousands: each is one
    function whose defaults hold what it uses (no closure cells, few objects to keep).
    """
    count = len(kernel.params)
    if finish:
        finishes = tuple(map(finish.get, kernel.params))
        finished = tuple(f is not None for f in finishes)
    else:  # made per kernel served: nothing built that is the same for every kernel
        finishes, finished = (None,) * count, (False,) * count
    fast_type, fast_attribute = fast_buffer if fast_buffer is not None else (None, None)
    make = _factory(kernel.params, fast_attribute, finished)
    steps: list[Step | None] = [None] * count  # made on first use
    convert: Converter = make(
        kernel, pointer, device, steps, count_error, _slow, fast_type, *finishes
    )
    return convert


def _slow(
    kernel: Kernel, pointer: Step, device: str, steps: list[Step | None], position: int, value: Any
) -> Any:
    """An argument off the fast path: the full check of its letter (made once per kernel
    and position) converts it or raises."""
    step = steps[position]
    if step is None:
        step = steps[position] = _step(kernel, position, pointer, device)
    return step(value)


@functools.lru_cache(maxsize=256)
def _factory(params: str, fast_attribute: str | None, finished: tuple[bool, ...]) -> Any:
    """The maker of a signature's converter, generated and compiled once per signature: a
    process that serves thousands of kernels with a few signatures compiles a few, and
    per kernel only makes its converter (`make(kernel, pointer, device, steps, count_error,
    slow, FastBuffer, *finishes)`: one function, what it uses bound as its defaults)."""
    count = len(params)
    names = [f"a{i}" for i in range(count)]
    finish_names = [f"f{i}" for i in range(count)]
    bound = ["kernel", "pointer", "device", "steps", "count_error", "slow", "FastBuffer"]
    bound += finish_names
    lines = [
        f"def make({', '.join(bound)}):",
        f"    def convert(args, {', '.join(f'{b}={b}' for b in bound)}):",
        f"        if len(args) != {count}:",
        "            raise count_error(kernel, args)",
    ]
    if count:
        lines.append(f"        {', '.join(names)}, = args")
    slow = "slow(kernel, pointer, device, steps, "  # the full check, off the fast path
    for i, letter in enumerate(params):
        a = names[i]
        if letter == "P" and fast_attribute is not None:
            fast = f"{a}.{fast_attribute} if type({a}) is FastBuffer else {slow}{i}, {a})"
            lines.append(f"        {a} = {fast}")
        elif letter in INT_RANGES:
            lo, hi = INT_RANGES[letter]
            test = f"type({a}) is not int or not {lo} <= {a} <= {hi}"
            lines.append(f"        if {test}: {a} = {slow}{i}, {a})")
        elif letter in FLOAT_LIMITS:
            limit = FLOAT_LIMITS[letter]
            test = f"type({a}) is not float or not {-limit!r} <= {a} <= {limit!r}"
            lines.append(f"        if {test}: {a} = {slow}{i}, {a})")
        else:  # a pointer with no fast buffer type, a bool
            lines.append(f"        {a} = {slow}{i}, {a})")
        if finished[i]:
            lines.append(f"        {a} = f{i}({a})")
    lines += [f"        return ({''.join(n + ', ' for n in names)})", "    return convert"]
    scope: dict[str, Any] = {}
    # generated from validated letters and an attribute name only
    exec(compile("\n".join(lines), "<warm launch arguments>", "exec"), scope)
    return scope["make"]


def any_buffer_of(device: str) -> Step:
    """`pointer` for a device whose buffers may be shape-only: any buffer of it passes."""

    def pointer(value: Any) -> Any:
        return 0 if isinstance(value, Buffer) and value.device_id == device else None

    return pointer
