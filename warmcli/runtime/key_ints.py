"""An int's text in a tune key, the same in every process whatever Python's limit on an
int's text (`PYTHONINTMAXSTRDIGITS`, `sys.set_int_max_str_digits`) is set to there.

`int_text` writes an int as its decimal digits below 10**4300 (the default limit, 4,300
digits), in hex from it; `big_ints_text` writes a `key=` value's JSON text with each of its
ints so (a dict's int key too, quoted as JSON quotes it), where JSON's own text of it
would follow the limit: raise under a lower one, or hold decimal digits past 10**4300
under a higher one (`ints_json`); `hex_int_text` and `decimal_int_text` say whether a str
is the text `int_text` writes for some int, `holds_hex_int` whether one holds such hex (a
list's JSON with one in it), and `decimal_int` reads a JSON int as `int` does under the
default limit, whatever the limit (a `key=` str is tagged where it is
another value's text: the same str is tagged alike in every process; `Pairs` is a JSON
object as read, its pairs kept). It owns no state.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from warmcli.printable import Pattern

# One of at most these bits is below 10**4300 (2**14284 < 10**4300 < 2**14285): only a
# longer one is compared with 10**4300, made then (not at import: ~35 us a process).
_DECIMAL_BITS = 14284
DEFAULT_DIGITS = 4300  # Python's default limit on an int's text
_SMALL_BITS = 2000  # an int of at most these bits has at most 603 digits: under any limit
_DECIMAL = Pattern(r"0|-?[1-9][0-9]*")  # an int's decimal text, as `str` writes it
_HEX_CHARS = 3574  # "0x" and 10**4300's 3,572 hex digits: the shortest hex `int_text` writes
_HEX_RUN = Pattern(r"-?0x[0-9a-f]{3572,}")  # one, whole, wherever in a text


class Pairs(dict[str, Any]):
    """A JSON object as read, every pair kept (a key twice: a dict's `1` and `"1"`), written
    back as read (the encoder writes a dict subclass's `items()`): `big_ints_text` keeps it."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__(pairs)
        self._pairs = pairs

    def items(self) -> Any:  # type: ignore[override]
        return self._pairs


def int_text(number: int) -> str:
    """`number` as decimal digits below 10**4300, whatever the limit; in hex from it."""
    if number.bit_length() <= _DECIMAL_BITS or abs(number) < 10**DEFAULT_DIGITS:
        try:
            return str(number)
        except ValueError:  # Python's limit on int text set lower: the same digits
            import decimal  # (imported here: no serving process needs it)

            return str(decimal.Decimal(number))
    return hex(number)  # past the default limit: in hex, whatever the limit is set to


def hex_int_text(text: str) -> bool:
    """Whether str `text` is the hex `int_text` writes for some int (one past 10**4300):
    the length first (every tune call with a str key asks), then the very text."""
    if len(text) < _HEX_CHARS or not text.startswith(("0x", "-0x")):
        return False
    try:
        number = int(text, 16)  # (no limit on a hex text's digits)
    except ValueError:
        return False
    return hex(number) == text and abs(number) >= 10**DEFAULT_DIGITS


def holds_hex_int(text: str) -> bool:
    """Whether str `text` is a list's or dict's text (`[` or `{` first) holding the hex
    `int_text` writes for some int (`hex_int_text`): a value's JSON text with an int past
    10**4300 in it (`[0x13...]`, no JSON) may be `text`. The length first (every tune call
    with a str key asks)."""
    if len(text) < _HEX_CHARS or text[:1] not in "[{" or "0x" not in text:
        return False
    return any(hex_int_text(found.group()) for found in _HEX_RUN.finditer(text))


def decimal_int_text(text: str) -> bool:
    """Whether str `text` is the decimal text `int_text` writes for some int (below
    10**4300: at most 4,300 digits), read without `int` (which follows the limit)."""
    return (
        len(text) <= DEFAULT_DIGITS + 1
        and _DECIMAL.fullmatch(text) is not None
        and (len(text) <= DEFAULT_DIGITS or text[0] == "-")
    )


def decimal_int(text: str) -> int:
    """JSON's int `text` as `int` reads it under the default limit, whatever the limit: a
    `ValueError` past 4,300 digits (an int keys in hex there: no key's text holds them)."""
    if len(text.lstrip("-")) > DEFAULT_DIGITS:
        raise ValueError(f"an int of {len(text.lstrip('-'))} digits")
    try:
        return int(text)
    except ValueError:  # Python's limit on int text set lower: the same int
        import decimal

        return int(decimal.Decimal(text))


def ints_json(value: Any, encode: Callable[[Any], str]) -> str:
    """`encode(value)` (JSON), its ints as `int_text` writes them whatever the limit."""
    try:
        text = encode(value)
    except ValueError:  # an int past this process's limit on an int's text
        return big_ints_text(value, encode)
    return big_ints_text(value, encode) if may_differ(text) else text


def may_differ(text: str) -> bool:
    """Whether JSON `text`, written under this process's limit, may hold an int past
    10**4300 in decimal (the limit raised or off: 0), which `int_text` writes in hex."""
    if len(text) <= DEFAULT_DIGITS:  # (every tune call keys: the short test first)
        return False
    limit = sys.get_int_max_str_digits()
    return limit == 0 or limit > DEFAULT_DIGITS


def big_ints_text(value: Any, encode: Callable[[Any], str]) -> str:
    """`encode(value)`, each int of more than `_SMALL_BITS` bits in it (in a dict, tuple or
    list, a dict's key too) written by `int_text`: a placeholder string stands in for it
    (a nonce of this call's: no string of the value's spells it), replaced in the text in
    one pass (one per stand-in was quadratic in a value of many)."""
    nonce = os.urandom(16).hex()  # (`uuid`'s import, ~0.5 ms, is no serving process's)
    texts: list[str] = []

    def stand_in(number: int, key: bool) -> str:
        digits = int_text(number)
        texts.append(json.dumps(digits) if key else digits)
        return f"\x00{nonce}:{len(texts) - 1}\x00"

    path: set[int] = set()  # the containers walked into: one inside itself, as JSON says

    def big(number: Any) -> bool:
        return (
            isinstance(number, int)
            and not isinstance(number, bool)
            and (number.bit_length() > _SMALL_BITS)
        )

    def walk(part: Any) -> Any:
        if big(part):
            return stand_in(part, False)
        if not isinstance(part, tuple | list | dict):
            return part
        if id(part) in path:
            raise ValueError("Circular reference detected")
        path.add(id(part))
        if isinstance(part, dict):
            pairs = [((stand_in(k, True) if big(k) else k), walk(v)) for k, v in part.items()]
            out: Any = Pairs(pairs) if isinstance(part, Pairs) else dict(pairs)
        else:
            out = [walk(v) for v in part]
        path.discard(id(part))
        return out

    text = encode(walk(value))
    if not texts:
        return text
    marks = re.compile(re.escape(json.dumps(f"\x00{nonce}:")[:-1]) + r"(\d+)\\u0000\"")
    return marks.sub(lambda found: texts[int(found.group(1))], text)
