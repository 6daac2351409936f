"""Launch arguments checked against the kernel's parameter letters, never guessed.

A converter is made once per kernel (and device) and then only called: it checks the
number of arguments, that a `P` gets a buffer of the device, that an integer letter gets
an integer in its width's range and a float letter a real number, and turns each argument
into what the backend passes (an address, a number). Any other argument is a
`LaunchError` naming the kernel, the argument's position, its letter and what was given.
The fast path of each argument is one type test and a range test, so a launch stays
cheap; that fast path is made once per signature and shared (`fast_converter`: a backend
may call it alone, and make a kernel's own converter only for arguments off it).
`check_before_load` checks an executed launch's arguments before its kernel is loaded, so
a wrong one compiles and looks up nothing. Its only state is bounded memos of those fast
paths (per signature, per letter) and of a float letter's range message; it never launches.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from warmcli.backends.base import Buffer, LaunchError
from warmcli.kernel import PARAM_DESCRIPTIONS, PARAM_SCALARS, Kernel

Converter = Callable[[Sequence[Any]], tuple[Any, ...]]
FastConverter = Callable[[Sequence[Any]], "tuple[Any, ...] | None"]  # `fast_converter`'s
Step = Callable[[Any], Any]

# Integer letters and their inclusive ranges; float letters and the largest magnitude that
# rounds to a finite value of their type (as C and numpy round: up to the midpoint between
# the type's largest value and the next power of two, which rounds to infinity), told from
# its width (IEEE 754: bytes -> significand bits, max exponent), not asked of numpy's
_IEEE = {2: (11, 15), 4: (24, 127), 8: (53, 1023)}  # iinfo/finfo (~0.15 ms at import)
_KINDS = {x: (np.dtype(t).kind, np.dtype(t).itemsize) for x, t in PARAM_SCALARS.items()}
INT_RANGES: dict[str, tuple[int, int]] = {
    x: (-(1 << (8 * n - 1)), (1 << (8 * n - 1)) - 1) if kind == "i" else (0, (1 << 8 * n) - 1)
    for x, (kind, n) in _KINDS.items()
    if kind in "iu"  # `np.issubdtype(t, np.integer)`, told without its walk
}


def _rounds_finite(size: int) -> float:
    digits, emax = _IEEE[size]
    top = math.ldexp(2.0 - math.ldexp(1.0, 1 - digits), emax)  # exact: the type's largest
    return top if size >= 8 else math.nextafter(top + math.ldexp(1.0, emax - digits), 0.0)


FLOAT_LIMITS = {x: _rounds_finite(n) for x, (kind, n) in _KINDS.items() if kind == "f"}


@functools.cache
def _float_expected(letter: str) -> str:
    """What a float letter takes, for an error message (its largest value as numpy writes
    it, float16's whole: 65504), told on its first."""
    top = np.finfo(PARAM_SCALARS[letter]).max
    largest = f"{int(top)}" if float(top) < 1e6 else np.format_float_scientific(top, unique=True)
    return f"a real number that rounds to a finite one (±{largest}), or inf or nan"


def _given(value: Any) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int past Python's 4,300 digits of text: shown in hex
        text = hex(value) if isinstance(value, int) else f"<{type(value).__name__}>"
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
        if isinstance(value, int | np.integer | np.bool_) and lo <= int(value) <= hi:
            return int(value)  # a bool, Python's or numpy's, is 1 or 0
        raise argument_error(kernel, position, expected, value)

    return step


def _float_step(kernel: Kernel, position: int) -> Step:
    letter = kernel.params[position]
    limit = FLOAT_LIMITS[letter]

    def step(value: Any) -> Any:
        if type(value) is float and -limit <= value <= limit:
            return value
        if isinstance(value, float | int | np.floating | np.integer) and not isinstance(
            value, bool | np.bool_
        ):
            try:
                number = float(value)
            except OverflowError:  # an int past every float: out of range
                raise argument_error(kernel, position, _float_expected(letter), value) from None
            if -limit <= number <= limit or number != number:
                return number
            if abs(number) == float("inf") and np.isinf(value):  # an inf given, not a
                return number  # finite long double past float64's range, which float() makes
        raise argument_error(kernel, position, _float_expected(letter), value)

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


_OFF = object()  # a fast test's answer for an argument off its fast path


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
    conversion of its checked value (how the backend passes it). The arguments go
    through the signature's fast path (`fast_converter`, shared by its kernels); any
    off it go through the full check of their letter (made on first use), which
    converts them or raises the `LaunchError`. A process serving thousands of kernels
    makes thousands: each is one function whose defaults hold what it uses (no closure
    cells, few objects to keep).
    """
    finishes = tuple(map(finish.get, kernel.params)) if finish else None
    fast_type, fast_attribute = fast_buffer if fast_buffer is not None else (None, None)
    fast = fast_converter(kernel.params, fast_type, fast_attribute, finishes)
    fasts = _fasts(kernel.params, fast_type, fast_attribute, finishes)
    steps: list[Step | None] = [None] * len(fasts)  # made on first use
    rest = (kernel, pointer, device, steps, fasts, finishes)
    if not _can_pass(kernel.params, fast_type, fast_attribute):  # the fast path never passes

        def checked(args: Sequence[Any], rest: tuple[Any, ...] = rest) -> Any:
            return _convert(args, *rest)

        return checked

    def convert(
        args: Sequence[Any], fast: FastConverter = fast, rest: tuple[Any, ...] = rest
    ) -> Any:
        passed = fast(args)
        return _convert(args, *rest) if passed is None else passed

    return convert


def _can_pass(params: str, fast_type: type | None, fast_attribute: str | None) -> bool:
    """Whether arguments of `params` can pass the fast path: every letter has a fast test
    in `_fast` (not a bool, nor a pointer where no fast buffer type is given)."""
    buffers = fast_type is not None and fast_attribute is not None
    return all(p in INT_RANGES or p in FLOAT_LIMITS or (p == "P" and buffers) for p in params)


@functools.lru_cache(maxsize=256)
def fast_converter(
    params: str,
    fast_type: type | None = None,
    fast_attribute: str | None = None,
    finishes: tuple[Callable[[Any], Any] | None, ...] | None = None,
) -> FastConverter:
    """A signature's fast path, made once and shared by every kernel of it: the arguments
    as passed (finished) when each passes its letter's fast test (one type test and a
    range test: `_fasts`), else None, for the kernel's own `converter` to check them
    fully and name what is wrong. One, two or three arguments are tested inline, more
    in a loop; nothing here names a kernel, so a kernel served needs none made."""
    fasts = _fasts(params, fast_type, fast_attribute, finishes)
    if len(fasts) == 1:
        (f0,) = fasts

        def fast1(args: Sequence[Any], f0: Step = f0) -> Any:
            if len(args) == 1 and (a0 := f0(args[0])) is not _OFF:
                return (a0,)
            return None

        return fast1
    if len(fasts) == 2:
        f0, f1 = fasts

        def fast2(args: Sequence[Any], f0: Step = f0, f1: Step = f1) -> Any:
            if (
                len(args) == 2
                and (a0 := f0(args[0])) is not _OFF
                and (a1 := f1(args[1])) is not _OFF
            ):
                return (a0, a1)
            return None

        return fast2
    if len(fasts) == 3:
        f0, f1, f2 = fasts

        def fast3(args: Sequence[Any], f0: Step = f0, f1: Step = f1, f2: Step = f2) -> Any:
            if (
                len(args) == 3
                and (a0 := f0(args[0])) is not _OFF
                and (a1 := f1(args[1])) is not _OFF
                and (a2 := f2(args[2])) is not _OFF
            ):
                return (a0, a1, a2)
            return None

        return fast3

    def fast(args: Sequence[Any], fasts: tuple[Step, ...] = fasts) -> Any:
        if len(args) != len(fasts):
            return None
        out = []
        for test, value in zip(fasts, args):  # noqa: B905  (lengths equal: tested above)
            passed = test(value)
            if passed is _OFF:
                return None
            out.append(passed)
        return tuple(out)

    return fast


def _convert(
    args: Sequence[Any],
    kernel: Kernel,
    pointer: Step,
    device: str,
    steps: list[Step | None],
    fasts: tuple[Step, ...],
    finishes: tuple[Callable[[Any], Any] | None, ...] | None,
) -> tuple[Any, ...]:
    """Every argument by its fast test, else by the full check of its letter (and its finish)."""
    if len(args) != len(fasts):
        raise count_error(kernel, args)
    out = []
    for position, (fast, value) in enumerate(zip(fasts, args, strict=True)):
        passed = fast(value)
        if passed is _OFF:
            passed = _slow(kernel, pointer, device, steps, position, value)
            end = finishes[position] if finishes is not None else None
            if end is not None:
                passed = end(passed)
        out.append(passed)
    return tuple(out)


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
def _fasts(
    params: str,
    fast_type: type | None,
    fast_attribute: str | None,
    finishes: tuple[Callable[[Any], Any] | None, ...] | None,
) -> tuple[Step, ...]:
    """A signature's fast tests, one per argument (made once per signature): each its
    value as passed (finished), or `_OFF` for the full check."""
    ends = finishes if finishes is not None else (None,) * len(params)
    return tuple(_fast(p, fast_type, fast_attribute, e) for p, e in zip(params, ends, strict=True))


@functools.lru_cache(maxsize=64)
def _fast(
    letter: str,
    fast_type: type | None,
    fast_attribute: str | None,
    end: Callable[[Any], Any] | None,
) -> Step:
    """One letter's fast test, shared by every kernel that has the letter."""
    fast: Step
    if letter == "P" and fast_type is not None and fast_attribute is not None:
        get = operator.attrgetter(fast_attribute)

        def fast(value: Any, kind: type = fast_type, get: Step = get) -> Any:
            return get(value) if type(value) is kind else _OFF

    elif letter in INT_RANGES:
        low, high = INT_RANGES[letter]

        def fast(value: Any, low: int = low, high: int = high) -> Any:
            return value if type(value) is int and low <= value <= high else _OFF

    elif letter in FLOAT_LIMITS:
        limit = FLOAT_LIMITS[letter]

        def fast(value: Any, low: float = -limit, high: float = limit) -> Any:
            return value if type(value) is float and low <= value <= high else _OFF

    else:  # a pointer with no fast buffer type, a bool: the full check

        def fast(value: Any) -> Any:
            return _OFF

    if end is None:
        return fast

    def finished(value: Any, fast: Step = fast, end: Callable[[Any], Any] = end) -> Any:
        passed = fast(value)
        return passed if passed is _OFF else end(passed)

    return finished


def any_buffer_of(device: str) -> Step:
    """`pointer` for a device whose buffers may be shape-only: any buffer of it passes."""

    def pointer(value: Any) -> Any:
        return 0 if isinstance(value, Buffer) and value.device_id == device else None

    return pointer


def check_before_load(kernel: Kernel, device: str, args: Sequence[Any]) -> None:
    """An executed launch's arguments checked before its kernel is loaded (keyed, looked up
    in the bundle or compiled): a `LaunchError` for what its letters do not take, the same
    as the device's. Arguments on the fast path (a buffer of `device` for `P`, a Python
    number in range, a bool for `?`) pass in this one frame (a served kernel's first launch
    pays little); any other goes through a checker made for the call, not kept (the device
    checks every later launch)."""
    params = kernel.params
    if len(args) == len(params):
        for letter, value in zip(params, args):  # noqa: B905  (lengths equal: tested above)
            if letter == "P":
                if not (isinstance(value, Buffer) and value.device_id == device):
                    break
            elif (bounds := INT_RANGES.get(letter)) is not None:
                if not (type(value) is int and bounds[0] <= value <= bounds[1]):
                    break
            elif letter in FLOAT_LIMITS:
                limit = FLOAT_LIMITS[letter]
                if not (type(value) is float and -limit <= value <= limit):
                    break
            elif type(value) is not bool:
                break
        else:
            return
    converter(kernel, device, any_buffer_of(device))(args)
