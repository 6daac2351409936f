"""A `key=` value's tune key names one value (keys43): no two values that differ share it.

Found by upgrade43: inside a list, tuple or dict, a str spelling the text another value
keys as there shared its key: `[frozenset({'sum', 'rows'})]` and
`["frozenset({'rows', 'sum'})"]` were both `["frozenset({'rows', 'sum'})"]` (one tune pick
served for the other), as were `[{'a'}]` and `["{'a'}"]`, `[b'a']` and `["b'a'"]`, an
array's `[np.array([1, 2])]` and `["[1 2]"]`. Such a str is tagged `str:` now (as a
top-level str spelling `1` is), and no other key's text changes. The property test draws
nested values of every type `key_text` keys by its JSON (hypothesis, derandomized) and
checks that two values key alike exactly when they are one value as the key reads it.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from warmcli.runtime.tune_spec import key_text


def test_a_str_spelling_a_set_array_or_bytes_inside_a_value_keys_apart_from_it() -> None:
    """Each pair shared one key; the value keys as before, the str is tagged."""
    pairs = [
        ({"ops": frozenset({"sum", "rows"})}, {"ops": "frozenset({'rows', 'sum'})"}),
        ([{"a"}], ["{'a'}"]),
        ([{1, -2}], ["{-2, 1}"]),
        ((set(),), ("set()",)),
        ([frozenset()], ["frozenset()"]),
        ([b"a"], ["b'a'"]),
        ([b"it's"], ['b"it\'s"']),
        ([np.bytes_(b"a")], ["b'a'"]),
        ([np.array([1, 2])], ["[1 2]"]),
        ([np.array([])], ["[]"]),
    ]
    for value, spelling in pairs:
        assert key_text("t", value) != key_text("t", spelling), spelling
        assert "str:" in key_text("t", spelling)
        assert "str:" not in key_text("t", value)  # (the value keys as stop 42's warm keyed it)
    assert key_text("t", ["str:{'a'}"]) == "[\"str:str:{'a'}\"]"  # the tag itself, tagged
    assert key_text("t", [{"a"}]) == "[\"{'a'}\"]"  # stop 42's text, unchanged


def test_other_strs_inside_a_value_key_as_before() -> None:
    """Only a str a set, array or bytes spells is tagged: a format string, a str in braces
    no set prints, a name: stop 42's keys."""
    for text in ["rows", "{x}", "{}", "{name}", "[", "b", "bx'", "frozenset", "set", "1", ""]:
        assert key_text("t", [text]) == json.dumps([text])
        assert key_text("t", {"k": text}) == json.dumps({"k": text})


def test_a_float32_array_keys_apart_from_the_float64_array_its_digits_spell() -> None:
    """`np.array([0.1], np.float32)` printed `[0.1]`, its own shortest digits, as float64's
    `np.array([0.1])` does: two arrays that differ shared one tune. A float16, float32 or
    complex64 array keys as float64 (complex128) writes its values; one whose values float64
    writes alike (`[0.5]`) keys as before."""
    for small, wide in [(np.float32, np.float64), (np.float16, np.float64)]:
        for shape in [(1,), (2, 2), ()]:
            a, b = np.full(shape, 0.1, small), np.full(shape, 0.1, wide)
            assert key_text("t", [a]) != key_text("t", [b]), (small, shape)
            assert key_text("t", [a]) == key_text("t", [a.astype(wide)])  # one value
            assert key_text("t", np.full(shape, 0.5, small)) == key_text("t", np.full(shape, 0.5))
    c = np.array([0.1 + 1j], np.complex64)
    assert key_text("t", c) != key_text("t", np.array([0.1 + 1j]))
    assert key_text("t", np.array([0.5, 1, 2], np.float32)) == '"[0.5 1.  2. ]"'  # stop 42's


def _canon(value: Any) -> Any:
    """`value` as one value of the key's reading: a tuple is a list (JSON has one form for
    both), a numpy number the Python number it holds, a dtype its name (it is equal to it),
    NaN one value, -0.0 apart from 0.0 (as JSON writes them), a dict's pairs in order."""
    if isinstance(value, np.generic) and not isinstance(value, np.bytes_ | np.str_):
        value = value.item()
    if isinstance(value, np.dtype):
        return ("str", str(value))
    if isinstance(value, np.ndarray):  # its kind of number and the very values it holds
        return ("array", value.dtype.kind, value.shape, repr(value.tolist()))
    if isinstance(value, bool) or value is None:
        return ("const", value)
    if isinstance(value, int):
        return ("int", value)
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else repr(value))
    if isinstance(value, str):
        return ("str", str(value))
    if isinstance(value, bytes):
        return ("bytes", bytes(value))
    if isinstance(value, tuple | list):
        return ("list", tuple(_canon(v) for v in value))
    if isinstance(value, frozenset):
        return ("frozenset", frozenset(value))
    if isinstance(value, set):
        return ("set", frozenset(value))
    assert isinstance(value, dict)
    return ("dict", tuple((_canon(k), _canon(v)) for k, v in value.items()))


_floats = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -0.0, 1e16])
_ints = st.integers(-(2**70), 2**70) | st.sampled_from([0, 1, -1])
_sets = (
    st.sets(st.text(max_size=3), max_size=3)
    | st.sets(_ints, max_size=3)
    | st.frozensets(st.text(max_size=3), max_size=3)
    | st.frozensets(_ints, max_size=3)
)
_numpy = st.one_of(
    _ints.filter(lambda n: abs(n) < 2**63).map(np.int64),
    st.floats(width=32).map(np.float32),
    st.booleans().map(np.bool_),
    st.sampled_from(["float32", "int8", "bool"]).map(np.dtype),
    st.text(max_size=3).map(np.str_),
    st.binary(max_size=3).map(np.bytes_),
    st.lists(st.floats(width=32), min_size=1, max_size=3).map(lambda v: np.array(v, np.float32)),
    st.lists(st.floats(width=16), min_size=1, max_size=3).map(lambda v: np.array(v, np.float16)),
    st.lists(_floats, max_size=3).map(lambda v: np.array(v, np.float64)),
    st.lists(st.integers(-9, 9), min_size=1, max_size=3).map(lambda v: np.array(v, np.int32)),
)
_plain = st.one_of(st.none(), st.booleans(), _ints, _floats, st.binary(max_size=3), _sets)
# A str is often another value's text: what it keys as, alone or inside a list, or the tag's.
_spelled = st.one_of(
    _plain.map(lambda v: key_text("t", v)),
    _plain.map(lambda v: key_text("t", [v])[1:-1]).map(lambda t: t[1:-1] if t[:1] == '"' else t),
    _plain.map(lambda v: "str:" + key_text("t", [v])[2:-2]),
)
_strs = st.text(max_size=4) | _spelled
_keys = st.one_of(st.none(), st.booleans(), _ints, _floats, _strs)
_values = st.recursive(
    _plain | _strs | _numpy,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(_keys, inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(_values, min_size=2, max_size=6))
def test_two_values_key_alike_exactly_when_they_are_one_value(values: list[Any]) -> None:
    """Injective: values that differ (as the key reads them, `_canon`) never share a key;
    values that are one (a set built in another order, a tuple and its list) share it."""
    seen: dict[str, Any] = {}
    for value in values:
        if isinstance(value, np.dtype):  # (a dtype alone keys as JSON's string of its name)
            continue
        text = key_text("t", value)
        canon = _canon(value)
        if text in seen:
            assert seen[text] == canon, (text, seen[text], canon)
        seen[text] = canon
    for value in values:
        if isinstance(value, np.dtype):
            continue
        assert key_text("t", _rebuilt(value)) == key_text("t", value)
        mirror = _mirror(value)
        if _canon(mirror) != _canon(value):
            assert key_text("t", mirror) != key_text("t", value), (value, mirror)


def _mirror(value: Any, nested: bool = False) -> Any:
    """`value` with each set, bytes and array inside a list, tuple or dict the str it keys as there:
    another value, whose key's text was the same as `value`'s."""
    if nested and isinstance(value, set | frozenset | bytes | np.ndarray):
        return json.loads(key_text("t", [value]))[0]
    if isinstance(value, tuple | list):
        return [_mirror(v, True) for v in value]
    if isinstance(value, dict):
        return {k: _mirror(v, True) for k, v in value.items()}
    return value


def _rebuilt(value: Any) -> Any:
    """`value` made again: each set from its elements in reverse order, tuples as lists."""
    if isinstance(value, set | frozenset):
        return type(value)(sorted(value, reverse=True))
    if isinstance(value, tuple | list):
        return [_rebuilt(v) for v in value]
    if isinstance(value, dict):
        return {k: _rebuilt(v) for k, v in value.items()}
    return value


def test_an_arrays_key_is_the_same_whatever_numpys_print_options_in_the_process() -> None:
    """An array keyed by its text followed `np.set_printoptions` (a sign, a line width,
    `nanstr`, a formatter, a lower threshold refusing it): a process that set them (a
    workload's import, a notebook) keyed it apart from `warm run` and missed every tune."""
    values = [[np.array([1.5, -2.0, np.nan])], {"a": np.arange(10)}, np.array(0.5, np.float32)]
    plain = [key_text("t", v) for v in values]
    options: dict[str, Any] = {"sign": "+", "linewidth": 5, "threshold": 3, "nanstr": "NaN"}
    with np.printoptions(**options, formatter={"float": lambda x: "F"}):
        assert [key_text("t", v) for v in values] == plain
        assert np.get_printoptions()["sign"] == "+"  # (the process's own, kept)
    with np.printoptions(legacy="1.13"):
        assert [key_text("t", v) for v in values] == plain
    # (where nan and inf print as numpy's defaults the options are handed to array2string
    # rather than set around it: the same text whatever else the process set)
    with np.printoptions(sign="+", floatmode="fixed", precision=2, suppress=True, edgeitems=1):
        assert [key_text("t", v) for v in values] == plain
    assert plain[0] == '["[ 1.5 -2.   nan]"]'  # stop 42's text under numpy's defaults
