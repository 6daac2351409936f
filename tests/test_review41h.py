"""Review of stop 41's last merges (review41h): key_ints (trial41d) through the real
`key_text` every tune call keys with.

- A `key=` int past 10**4300 keys in hex (`0x...`, trial41d); a str `key=` value (or a
  dict's str key) spelling that hex was not tagged, so the two values shared one tune key.
- `big_ints_text` replaced each big int's stand-in with one pass over the whole text per
  int: a `key=` value holding thousands of ints past 2,000 bits beside one past 10**4300
  took seconds (quadratic) on every tune call.
- Whether a str `key=` value (or a dict's str key) is tagged as another value's text
  followed the process's limit on an int's text: `"1" * 2000` keyed as `str:111...` in a
  default process, as `111...` (the int's very text) where `PYTHONINTMAXSTRDIGITS=1000`,
  and `"1" * 5000` tagged only where the limit was off: one key= value, two keys (a
  JSON object's key twice beside an int of 700 digits too, under a limit of 640).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from counted_calls import counted

from warmcli.runtime.tune_spec import key_text

BIG = 10**4300  # the first int keyed in hex


def test_a_str_spelling_a_big_ints_hex_is_not_that_ints_key() -> None:
    for value in (BIG, -BIG, BIG * 7 + 3):
        assert key_text("t", value) == hex(value)  # as an input's (trial41d)
        assert key_text("t", hex(value)) != key_text("t", value)
        assert key_text("t", {hex(value): 1}) != key_text("t", {value: 1})


def test_texts_that_no_big_int_writes_keep_their_key() -> None:
    small = hex(BIG - 1)  # below 10**4300: an int writes decimal digits there
    padded = "0x0" + hex(BIG)[2:]
    for text in ("0xff", "-0x10", small, hex(BIG).upper(), hex(BIG) + " ", padded):
        assert key_text("t", text) == text
        assert key_text("t", {text: 1}) == '{"' + text + '": 1}'


def test_many_big_ints_key_in_linear_time() -> None:
    count = 4000  # took ~3 s before, 4x that for twice as many: a pass over the text each
    value = [BIG, *([2**2001] * count)]
    with counted() as calls:
        text = key_text("t", value)
    passes = calls["str.replace"] + calls["Pattern.sub"]  # over the whole text
    assert passes == 1, passes  # (a pass a big int: 4,001)
    assert text == "[" + ", ".join([hex(BIG), *([str(2**2001)] * count)]) + "]"


TEXTS = """\
import hashlib, sys
from warmcli.runtime.tune_spec import key_text
for size in (700, 2000, 4300, 4301, 5000):
    d = "1" * size
    twice = '{"a": 1, "a": ' + d + "}"  # a JSON object's key twice, as JSON reads it
    for v in (d, "-" + d, {d: 1}, "[" + d + "]", [d], (10 ** min(size, 4300) - 1) // 9, twice):
        print(size, hashlib.sha256(key_text("t", v).encode()).hexdigest())
"""


def test_str_keys_tag_alike_whatever_the_limit_on_an_ints_text() -> None:
    root = str(Path(__file__).resolve().parent.parent)
    outs = []
    for limit in ("4300", "1000", "640", "0", "100000"):
        env = {**os.environ, "PYTHONPATH": root, "PYTHONINTMAXSTRDIGITS": limit}
        run = subprocess.run(
            [sys.executable, "-c", TEXTS], env=env, capture_output=True, text=True, timeout=60
        )
        assert run.returncode == 0, run.stderr
        outs.append(run.stdout)
    assert all(out == outs[0] for out in outs[1:])


def test_a_sets_big_int_keys_in_hex_whatever_the_limit() -> None:
    """A set's ints were written by `repr`: one past 10**4300 refused in a default process
    (`no JSON text: Exceeds the limit`), keyed in decimal where the limit was off."""
    code = (
        "from warmcli.runtime.tune_spec import key_text\n"
        "print(key_text('t', {'a': [{10**5000, 3}, frozenset({-(10**4300), 7**800})]}))\n"
    )
    root = str(Path(__file__).resolve().parent.parent)
    outs = set()
    for limit in ("4300", "1000", "0"):
        env = {**os.environ, "PYTHONPATH": root, "PYTHONINTMAXSTRDIGITS": limit}
        run = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
        )
        assert run.returncode == 0, run.stderr
        outs.add(run.stdout)
    sets = f"{{3, {hex(10**5000)}}}", f"frozenset({{{hex(-(10**4300))}, {7**800}}})"
    assert outs == {'{"a": ["' + sets[0] + '", "' + sets[1] + '"]}\n'}
