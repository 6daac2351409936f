"""A `f` argument is taken wherever it rounds to a finite float32, as C and numpy round
it: `3.4028235e38` (float32's largest value, as numpy prints it) was refused, with a
message naming a bound of "±3.40282e+38" it seemed to be within; past the rounding
midpoint it is still refused, and the message names the bound exactly. The real host
runtime, launching a real kernel.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import warmcli
from warmcli import Kernel
from warmcli.errors import LaunchError

STORE = Kernel("void g(float *o, float c) { o[0] = c; }", "g", "Pf")
MAX32 = float(np.finfo(np.float32).max)
MIDPOINT = MAX32 + (MAX32 - float(np.nextafter(np.float32(MAX32), np.float32(0)))) / 2


@pytest.fixture
def rt(monkeypatch: pytest.MonkeyPatch, tmp_path) -> Iterator[warmcli.Runtime]:
    monkeypatch.setenv("WARM_BUNDLE", "")
    monkeypatch.setenv("WARM_HOME", str(tmp_path))
    warmcli.production.close()  # (what an earlier test of this process left: looked afresh)
    yield warmcli.runtime("host")
    warmcli.production.close()  # (nor does it leave its own: production "looked, found none")


@pytest.mark.parametrize("value", [3.4028235e38, -3.4028235e38, float(np.nextafter(MIDPOINT, 0))])
def test_a_value_that_rounds_to_float32s_largest_is_taken(rt, value: float) -> None:
    out = rt.buffer(1)
    rt.launch(STORE, out, value)
    assert abs(float(rt.read(out)[0])) == MAX32


@pytest.mark.parametrize("value", [MIDPOINT, 3.4028236e38, float("1e39")])
def test_past_the_midpoint_is_refused_naming_the_bound(rt, value: float) -> None:
    with pytest.raises(LaunchError) as caught:
        rt.launch(STORE, rt.buffer(1), value)
    assert "3.4028235e+38" in str(caught.value), str(caught.value)
