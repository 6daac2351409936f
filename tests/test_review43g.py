"""A `key=` value's tune key names one value (review43g): collisions keys43's property
test missed (it draws 1-d arrays of at least one element, no 0-d or object array).

An empty array printed `[]` whatever its shape: `np.zeros((0, 3))` and `np.zeros((2, 0))`
shared a tune; a 0-d array printed its number as a str, `[np.array(3)]` keyed as `["3"]`;
an object array holding an array of more than 1,000 elements printed it abbreviated
(`...`), so two that differ shared a tune, and was not refused as such an array alone is.
A complex64 scalar printed its own shortest digits, complex128's of another value; a
longdouble array printed `[0.1]` as float64's `[0.1]` does (another value), and a longdouble
scalar was refused as "nested too deeply". An object array holding a set printed it in
its strings' hash order: a key different in every process (no bundle served it).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from warmcli.errors import TuneSpecError
from warmcli.runtime.tune_spec import key_text


def test_empty_arrays_of_different_shapes_key_apart() -> None:
    shapes = [(0,), (0, 3), (3, 0), (2, 0), (0, 0), (1, 0, 2)]
    texts = {key_text("t", [np.zeros(s)]) for s in shapes}
    assert len(texts) == len(shapes), texts
    assert key_text("t", [np.zeros(0)]) == '["[]"]'  # a 1-d one keys as stop 42's
    json_str = key_text("t", [np.zeros((0, 3))])
    assert key_text("t", [json_str[2:-2]]) != json_str  # and a str spelling it is tagged


def test_a_0d_array_keys_as_the_number_it_holds_not_as_its_text() -> None:
    for zero_d, spelling in [(np.array(3), "3"), (np.array(0.5), "0.5"), (np.array(True), "True")]:
        assert key_text("t", [zero_d]) != key_text("t", [spelling]), spelling
        assert key_text("t", [zero_d]) == key_text("t", [zero_d.item()])  # as np.int64(3) keys
    assert key_text("t", {"n": np.array(3, np.int8)}) == '{"n": 3}'
    f32 = np.array(0.1, np.float32)
    assert key_text("t", [f32]) != key_text("t", [np.array(0.1)])  # (keys43's, kept)


def test_an_object_array_holding_an_abbreviated_array_is_refused() -> None:
    a, b = np.arange(2000), np.arange(2000)
    b[1000] = -1  # (a middle element numpy leaves out of the text)
    for big in (a, b):
        holder = np.array([None, 1], dtype=object)
        holder[0] = big
        with pytest.raises(TuneSpecError, match="2000 elements"):
            key_text("t", [holder])
    small = np.array([None, 1], dtype=object)
    small[0] = np.arange(5)
    assert "..." not in key_text("t", [small])  # a small one keys as before


def test_a_complex64_scalar_keys_apart_from_the_complex128_its_digits_spell() -> None:
    assert key_text("t", [np.complex64(0.1 + 1j)]) != key_text("t", [np.complex128(0.1 + 1j)])
    assert key_text("t", [np.complex64(0.5 + 1j)]) == '["(0.5+1j)"]'  # stop 42's, kept


def test_a_longdouble_float64_cannot_hold_is_refused_naming_the_tunable() -> None:
    tenth = np.longdouble(1) / np.longdouble(10)
    if tenth == np.longdouble(0.1):  # (a platform whose longdouble is float64)
        pytest.skip("longdouble is float64 here")
    for value in ([tenth], [np.array([tenth])], {"a": np.array([tenth, 1])}, tenth):
        with pytest.raises(TuneSpecError, match=r"tunable t: .*float64 cannot hold"):
            key_text("t", value)
    half = np.longdouble(0.5)  # one float64 holds keys as float64's
    assert key_text("t", [half, np.array([half])]) == key_text("t", [0.5, np.array([0.5])])


_SET_IN_ARRAY = """
import numpy as np
from warmcli.runtime.tune_spec import key_text
h = np.array([None, 1], dtype=object)
h[0] = {"alpha", "beta", "gamma", "delta", "eps"}
try:
    print(key_text("t", [[h]]))
except Exception as exc:
    print(type(exc).__name__, exc)
"""


def test_an_object_array_holding_a_set_is_refused_not_keyed_apart_in_each_process() -> None:
    root = str(Path(__file__).resolve().parents[1])
    outs = set()
    for seed in ("1", "2", "3"):
        env = {"PYTHONHASHSEED": seed, "PYTHONPATH": root}
        run = subprocess.run([sys.executable, "-c", _SET_IN_ARRAY], env=env, text=True,
                             capture_output=True, check=True)  # fmt: skip
        outs.add(run.stdout.strip())
    [out] = outs  # the same in every process: refused, naming the tunable
    assert out.startswith("TuneSpecError tunable t: key= gave an object array holding a set")
