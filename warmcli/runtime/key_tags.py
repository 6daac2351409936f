"""Which strings of a `key=` value are tagged `str:` in its tune key's text, so that no two
values share one text (one tune pick served for the other).

`tagged` is a `key=` value that is a str: itself, unless some other value's JSON text is
that string (`"1"` is `1`'s), it spells a big int's hex, or it starts with the tag.
`tag_parts` is a value holding strings: each dict's str key that JSON writes as it writes
another key (`"1"` as `1`'s), and each str inside a list, tuple or dict that spells the
text a value JSON has no form for is keyed as (a set's `"{'a'}"`, `"set()"`,
`"frozenset({1})"`; an array's `"[1 2]"`; bytes' `"b'a'"`), or that starts with the tag,
tagged; no other string, so no other key's text changes. It owns no state.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from warmcli.printable import Pattern
from warmcli.runtime.key_ints import (
    Pairs,
    decimal_int,
    decimal_int_text,
    hex_int_text,
    holds_hex_int,
    ints_json,
)

TAG = "str:"  # before a key= string that another value's text is (no JSON starts "s")
_JSON_FIRST = frozenset('[{"-0123456789ntfNI')  # how JSON text starts (NaN, Infinity too)
_NUMBER_FIRST = frozenset("-0123456789")  # how an int's or a finite float's text starts
_SCALAR_KEYS = frozenset(("true", "false", "null", "NaN", "Infinity", "-Infinity"))
_JSON = json.JSONEncoder().encode  # (what JSON reads holds nothing that needs `default`)
_SET_FIRST = frozenset("'\"-0123456789")  # a set's first element: a str's repr or an int
# The ends of a str inside a value that is another value's text there: a set's, a
# frozenset's, a numpy array's (of 1 or more dimensions) or bytes'; how JSON writes it.
_SPELLED = Pattern(r""""(?:[\[{]|str:|set\(\)"|frozenset\(|b['\\])""")


def tagged(text: str) -> str:
    """A `key=` string as its key's text: itself, unless some other value's JSON text is
    that string (`"1"` is `1`'s, `"null"` None's, `"[0x13...]"` a list's holding an int past
    10**4300: one tune key for two values) or it starts with the tag; then tagged, so no two
    values share a text and no other key's text changes."""
    if text[:1] in _JSON_FIRST:
        try:
            read = json.loads(text, object_pairs_hook=Pairs, parse_int=decimal_int)
            if ints_json(read, _JSON) == text:  # another's (the limit aside)
                return TAG + text
        except (ValueError, RecursionError):  # no JSON, or nested past what it reads
            pass
    if text.startswith(TAG) or hex_int_text(text) or holds_hex_int(text):
        return TAG + text  # (a big int's hex, or a value's JSON holding one: `[0x13...]`)
    return text


def _key(key: Any) -> Any:
    """A dict's key as JSON writes it in a key's text: a numpy number as the Python number it
    holds (the encoder calls no `default` for a key); a str tagged where JSON writes some
    other key so (`"1"` is `1`'s, `"null"` None's, `"1.5"` 1.5's) or it starts with the tag
    (as `tagged` tags a `key=` str); any other key itself, the very object."""
    if isinstance(key, np.bool_ | np.integer | np.floating):
        return key.item()
    if not isinstance(key, str):
        return key
    if key in _SCALAR_KEYS or key.startswith(TAG) or hex_int_text(key):  # a big int's
        return TAG + key
    if key[:1] in _NUMBER_FIRST:
        if decimal_int_text(key):  # an int's (not past 4,300 digits: in hex there)
            return TAG + key
        try:
            number = float(key)
            if math.isfinite(number) and repr(number) == key:
                return TAG + key
        except ValueError:
            pass
    return key


def spelled(text: str) -> bool:
    """Whether str `text`, inside a list, tuple or dict, is tagged: it starts with the tag,
    or is the text a value JSON has no form for keys as there (a JSON string): a set's
    (`{'a'}`, `{1, 2}`, `set()`), a frozenset's, a numpy array's (`[1 2]`) or bytes'
    (`b'a'`), by its form (any text in brackets is some object array's)."""
    if text.startswith(TAG) or text in ("set()", "frozenset()"):
        return True
    first, last = text[:1], text[-1:]
    if first == "{":
        return last == "}" and text[1:2] in _SET_FIRST
    if first == "[":
        return last == "]"
    if first == "f":
        return text.startswith("frozenset({") and text.endswith("})")
    return first == "b" and len(text) > 2 and text[1] in "'\"" and last == text[1]


def may_spell(text: str) -> bool:
    """Whether JSON `text` may hold a str `tag_parts` tags (a quick look at its text)."""
    return "{" in text or ('"' in text and _SPELLED.search(text) is not None)


def tag_parts(value: Any) -> Any:
    """`value` with each dict's keys as `_key` has them and each str in it that `spelled`
    says tagged; `value` itself, the very object, where nothing changes (a part as JSON
    reads it: a dict or a list, tuple)."""
    if isinstance(value, str):
        return TAG + value if spelled(value) else value
    if isinstance(value, dict):
        out, changed = {}, False
        for k, v in value.items():
            out[new_k := _key(k)] = new_v = tag_parts(v)
            changed = changed or new_k is not k or new_v is not v
        return out if changed else value
    if isinstance(value, tuple | list):
        parts, changed = [], False
        for v in value:
            parts.append(new_v := tag_parts(v))
            changed = changed or new_v is not v
        return parts if changed else value
    return value
