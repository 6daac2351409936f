"""A define or option no compiler can take is refused where the `Kernel` is made, naming
the kernel: a float define of nan or inf (it reached the compiler as `nan`, an undeclared
name, failing the compile), and a NUL byte in an option (`ValueError: embedded null byte`
from deep in the compile, naming nothing) or in a define's text. The real `Kernel`.
"""

from __future__ import annotations

import numpy as np
import pytest

from warmcli import Kernel

SOURCE = "void f(float *x, int n) { for (int i = 0; i < n; i++) x[i] = V; }"


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({"defines": {"V": float("nan")}}, "define V: nan is no C number"),
        ({"defines": {"V": float("-inf")}}, "define V: -inf is no C number"),
        ({"defines": {"V": np.float32("inf")}}, "define V: inf is no C number"),
        ({"defines": {"V": "1\x00"}}, "define V: its value holds a NUL byte"),
        ({"defines": {"V": 1}, "options": ("-O2", "-DW=1\x00")}, "option 2 holds a NUL byte"),
    ],
)
def test_a_value_no_compiler_takes_is_refused_naming_the_kernel(extra: dict, said: str) -> None:
    with pytest.raises(ValueError, match=r"^kernel f: ") as caught:
        Kernel(SOURCE, "f", "Pi", **extra)
    assert said in str(caught.value), str(caught.value)


def test_finite_floats_are_still_taken() -> None:
    k = Kernel(SOURCE, "f", "Pi", defines={"V": 1e300})
    assert k.define("V") == "1e+300"
