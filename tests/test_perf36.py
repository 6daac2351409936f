"""What a hot production start no longer pays at import (perf36) still means the same.

The launch argument limits and the letters' type names are told from each type's width,
not asked of numpy at import: they must be numpy's to the last bit, and the message
naming a float's range (made on a bad argument's first) must read as it did."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from warmcli.backends import launch_args
from warmcli.kernel import PARAM_SCALARS


def _numpy_rounds_finite(t: Any) -> float:
    top = float(np.finfo(t).max)
    if np.dtype(t).itemsize >= 8:
        return top
    midpoint = top + (top - float(np.nextafter(t(top), t(0)))) / 2
    return float(np.nextafter(midpoint, 0.0))


@pytest.mark.parametrize("letter", sorted(PARAM_SCALARS))
def test_launch_limits_are_numpys_own(letter: str) -> None:
    t = PARAM_SCALARS[letter]
    kind = np.dtype(t).kind
    if kind in "iu":
        assert launch_args.INT_RANGES[letter] == (int(np.iinfo(t).min), int(np.iinfo(t).max))
    else:
        assert letter not in launch_args.INT_RANGES
    if kind == "f":
        assert launch_args.FLOAT_LIMITS[letter] == _numpy_rounds_finite(t)
    else:
        assert letter not in launch_args.FLOAT_LIMITS


def test_a_float_arguments_range_reads_as_numpy_writes_it() -> None:
    expected = "a real number that rounds to a finite one (±{}), or inf or nan"
    assert launch_args._float_expected("e") == expected.format("65504")
    assert launch_args._float_expected("f") == expected.format("3.4028235e+38")
    assert launch_args._float_expected("d") == expected.format("1.7976931348623157e+308")


def test_each_letters_type_name_is_numpys() -> None:
    """`PARAM_DTYPES` is told from each type's kind and width, not asked of numpy."""
    from warmcli.kernel import PARAM_DTYPES

    assert {x: np.dtype(t).name for x, t in PARAM_SCALARS.items()} == PARAM_DTYPES
