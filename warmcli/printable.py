"""Text from a bundle (or any other untrusted source), made safe to show on a terminal or log.

A bundle's labels, operations, shapes, candidate names, fingerprints, manifest
values and toolchains are untrusted: an ESC or OSC sequence in one would drive the
reader's terminal (clear it, set its title, plant a hyperlink), a CR or LF would
forge a line of output or of a `WARM_EXPLAIN` log, and a bidi override would show
text other than what is there; a lone surrogate (text that is not Unicode) cannot be
written at all. `printable` replaces every such character with a visible escape
(`\\x1b`, `\\u202e`, `\\ud800`), so what is shown is what is stored, on one line;
so is an invisible one (a zero-width space, a byte order mark, a Hangul filler, a
variation selector: every default-ignorable code point), which would make two
different texts read alike. `visible` shows a user's name that is empty or blank (a tune
key `""` or `" "`) quoted, so that it reads as what it is.
`escaped_within` escapes the user's own texts inside a message so. `cut` shortens a
text a line names to its first `CUT_CHARS` (a shape may be megabytes);
`LISTED` is how many entries of a list any report names.
`lone_surrogate` finds one in text a workload hands warm, to refuse it where it is made;
`spelled_surrogates` writes each in a document (a path of bytes no UTF-8 has, as Python reads
it) as the text `\\udcff`, so that its JSON is what strict readers take.
Rich markup is the renderer's to refuse: the CLI hands Rich `Text`, never markup.
`Pattern` is a regular expression compiled on its first use, for warm's modules that
define patterns (compiling one costs 40-700 µs at import, in processes that may never
use it). `natural` is the sort key that orders numbers as numbers, wherever warm lists
a bundle's names. This module owns no state but each `Pattern`'s compiled form, and never prints.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

_T = TypeVar("_T")

CUT_CHARS = 512  # what a line or a table cell shows of one text (`cut`)
LISTED = 1_000  # entries a report names of a longer list (every command's); the rest counted
_METHODS = ("fullmatch", "match", "search", "sub", "subn", "split", "findall", "finditer")


class Pattern:
    """`re.compile(pattern, flags)`, compiled when first used (`fullmatch`, `sub`, ...); its
    methods are then the compiled pattern's own, bound once."""

    def __init__(self, pattern: str | bytes, flags: int = 0) -> None:
        self.pattern = pattern
        self.flags = flags

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # copy's and pickle's probes: not a pattern's methods
            raise AttributeError(name)
        compiled = re.compile(self.pattern, self.flags)
        for method in _METHODS:
            setattr(self, method, getattr(compiled, method))
        return getattr(compiled, name)


# C0 and C1 controls, DEL, the invisible format characters (that reorder or break lines,
# or show nothing: a soft hyphen, zero-width spaces and joiners, word joiners and invisible
# operators, a byte order mark, tags), every other of Unicode's default-ignorable code
# points (a combining grapheme joiner, Hangul fillers, Khmer inherent vowels, variation
# selectors, shorthand and musical format controls), and lone surrogates (a packed
# document's text, read with "surrogatepass": no terminal's encoding can write one).
_UNSAFE = Pattern(
    "[\x00-\x1f\x7f-\x9f\xad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f"
    "\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ud800-\udfff"
    "\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e0fff]"
)
_SURROGATE = Pattern("[\ud800-\udfff]")  # (a str holds a pair as one character: each is lone)
_BLANK = Pattern("[^ ]")  # what a text of spaces only shows escaped (`visible`)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(value: object) -> str:
    """`value` as text on one line, every control, reordering or invisible character
    visibly escaped."""
    return _UNSAFE.sub(_escape, str(value))


def visible(value: object) -> str:
    """`printable(value)`, where the text is empty or blank (spaces, tabs, no-break spaces)
    quoted with each character but a space escaped (`""`, `" "`, `"\\xa0"`): a name a
    user chose (a tune's key) that would read as nothing, or as another blank."""
    text = str(value)
    if text.strip():
        return printable(text)
    return f'"{_BLANK.sub(_escape, text)}"'


def cut(value: object, limit: int = CUT_CHARS) -> str:
    """`value` as text, cut after `limit` characters, saying its length (a bundle's label or
    a tune's shape may be megabytes long: a line names it, the JSON document holds it)."""
    text = str(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


def escaped_within(message: str, texts: Iterable[str | None]) -> str:
    """`message` with each of `texts` (a path the user gave, as given or made absolute)
    that holds a character `printable` escapes written as it writes it: a path with a
    newline in it names it on one line, not two."""
    for text in texts:
        if text and _UNSAFE.search(text) is not None:
            for form in dict.fromkeys((text, os.path.abspath(text))):
                message = message.replace(form, printable(form))
    return message


def printable_lines(value: object) -> list[str]:
    """`value`'s lines (a compiler log, a multi-line error), each made `printable`."""
    return [printable(line) for line in str(value).splitlines()]


def lone_surrogate(text: str) -> str | None:
    """The first lone surrogate in `text` (UTF-8 cannot encode it: no file, nor a bundle,
    can hold it), else None; ASCII text is answered without a scan."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return text[exc.start]
    return None


def spelled_surrogates(value: Any) -> Any:
    """`value` (JSON's types: a `dict`, `list`, `tuple`, `str`, a path) with each lone surrogate
    in its texts, keys too, written as `printable` writes it (the text `\\udcff`): `json.dumps`
    writes one as an escape (`"\\udcff"`) that strict JSON readers refuse (serde_json's "lone
    leading surrogate"), the whole document with it. Anything else is as it is."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if isinstance(value, str):
        return _SURROGATE.sub(_escape, value) if lone_surrogate(value) else value
    if isinstance(value, dict):
        return {spelled_surrogates(k): spelled_surrogates(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [spelled_surrogates(item) for item in value]
    return value


def refuse_lone_surrogate(owner: str, what: str, text: str) -> None:
    """`ValueError` naming `owner`'s `what` where `text` holds a lone surrogate
    (`lone_surrogate`): what warm would have to write into a file or a bundle."""
    if (bad := lone_surrogate(text)) is not None:
        raise ValueError(f"{owner}: {what} holds {bad!r}, a lone surrogate: no file can hold "
                         "it (UTF-8 has no form for it)")  # fmt: skip


def refuse_unreadable(owner: str, what: str, text: str) -> None:
    """`refuse_lone_surrogate`, and `ValueError` where `text` holds a NUL byte: a compiler
    reads past one as a blank (`#\\0include "h.h"` is an include to gcc, with a warning) where
    warm's scans of a kernel's directives (its key's headers, what shares a unit) would not,
    and no command line holds one."""
    refuse_lone_surrogate(owner, what, text)
    if "\0" in text:
        raise ValueError(f"{owner}: {what} holds a NUL byte (at {text.index(chr(0))}): "
                         "remove it (a compiler reads past it, warm's key would not)")  # fmt: skip


def natural(text: object) -> list[Any]:
    """A sort key that orders numbers as numbers: `BLOCK=128` before `BLOCK=1024`, shape
    `64x64` before `200x200` (text and numbers alternate, so any two keys compare). A
    number is its digits' count and digits (leading zeros off): a bundle's may have any
    length, past what `int()` takes. Only the first `CUT_CHARS` characters are ordered by,
    as a line shows them: a bundle's text of megabytes (a label, options, a shape) would
    be a key of millions of parts, some 40 bytes of memory a character, one a row."""
    parts = _DIGITS.split(str(text)[:CUT_CHARS])
    return [_number(p) if i % 2 else p for i, p in enumerate(parts)]


def first_naturally(n: int, items: Iterable[_T], key: Callable[[_T], Any] = natural) -> list[_T]:
    """The `n` first of `items` by `key` (`natural`: numbers as numbers), holding `n` at a
    time (`heapq.nsmallest`, imported here on first use: a serving process needs none)."""
    from heapq import nsmallest

    return nsmallest(n, items, key=key)


def _number(digits: str) -> tuple[int, str]:
    digits = digits.lstrip("0")
    return len(digits), digits


_DIGITS = Pattern("([0-9]+)")
