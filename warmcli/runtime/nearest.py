"""The nearest held entries to a missed one, found without comparing against each per miss.

`nearest` scores every held entry (the components it differs in from the one wanted,
in a given order) and keeps the closest: fewest differing components, then those
differing earliest in the order. `Listed` is one kernel entry's or tunable operation's
held entries as a miss listed them, kept by its caller (`warmcli.runtime.misses`) for
the next miss of the same entry, so a workload that misses many builds of one entry
name lists its rows once, not once a miss: it answers `nearest` by an index of the held
entries on all components but one (the usual miss differs in one: a kernel's defines or
source, a tune's shape), each built on the first miss that asks for it, and by the
whole scan otherwise (no entry within one component, or a value that is not text), and
keeps what the explanation says of them for the next miss: each value's shown text
(`shown`), what it says of one index bucket (`said`), whether any held entry passes a
test (`holds`), each held shape's parts. `shape_distance` says how near a tune's held
shape is to the one wanted, `nearest_shapes` which are nearest (the first few, not all
sorted) and `nearest_values` what is said of them; `key_form_hint`, the hint of a tune key
of a form (`key_form`: its text, each word or number one letter) no held key has, as a
changed `key=` gives (a list where they were numbers, the inputs' shapes where they were
`key=`'s): the held keys' forms made once per listing (`forms`); `float_hint`, that of a
key differing from a held one in its floats only (a scalar input drawn at random: the held
keys, floats masked, made once per listing, `floatless`);
`reordered_hint`, that of a kernel's options held in another order (made from a set).
Its answers are those of the scan. It owns only those memos, never reads
a bundle itself and never prints.
"""

from __future__ import annotations

import bisect
import heapq
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from warmcli.printable import Pattern

_T = TypeVar("_T")
_Row = TypeVar("_Row")  # what a listing holds: a kernel's components, a tune's record
Found = tuple[tuple[str, ...], list[Mapping[str, str]]]
# the other components' values -> the held entries with them, in held order
_Index = dict[tuple[str | None, ...], list[Mapping[str, str]]]
_BucketName = tuple[tuple[str, ...], int, tuple[str | None, ...]]  # (order, i, the others)


def nearest(
    wanted: Mapping[str, str], held: Sequence[Mapping[str, str]], order: Sequence[str]
) -> Found:
    """The components the closest held entries differ in (in `order`), and those entries."""
    scored = [(tuple(c for c in order if h.get(c) != wanted.get(c)), h) for h in held]
    best = min((d for d, _ in scored), key=lambda d: (len(d), [order.index(c) for c in d]))
    return best, [h for d, h in scored if d == best]


class Listed(Generic[_Row]):
    """One entry's (or operation's) listing, kept for its next miss; see the module doc.

    `rows` is what was listed (or the problem that stopped the listing), `held` their
    components (a kernel listing's rows are)."""

    def __init__(
        self, rows: list[_Row] | str, held: Sequence[Mapping[str, str]] | None = None
    ) -> None:
        self.rows = rows
        self.held: Sequence[Mapping[str, str]] = (
            held if held is not None else [] if isinstance(rows, str) else rows  # type: ignore[assignment]
        )
        self.shown: dict[tuple[str, str], str] = {}  # (component, value) -> its text shown
        self._text: dict[tuple[str, ...], bool] = {}  # order -> every held value text or none
        self._indexes: dict[tuple[tuple[str, ...], int], _Index] = {}  # (order, i) -> index
        self._last: tuple[list[Mapping[str, str]], _BucketName] | None = None  # `said`'s
        self._said: dict[tuple[str, _BucketName], Any] = {}
        self._holds: dict[str, bool] = {}
        self.forms: set[str] | None = None  # each held tune key's form (`key_form_hint`)
        self.floatless: set[str] | None = None  # each held tune key, floats masked (`float_hint`)
        self.shapes: dict[str, _Parts] = {}  # a held shape's parts (`nearest_shapes`)

    def said(self, component: str, near: Sequence[Mapping[str, str]], say: Callable[[], _T]) -> _T:
        """`say()`, what is said of `component` in `near` (or made of it): once for a bucket
        of the index (the same nearest entries at each miss), else every time."""
        last = self._last
        if last is None or last[0] is not near:
            return say()
        text = self._said.get((component, last[1]))
        if text is None:
            text = self._said[(component, last[1])] = say()
        return text

    def is_bucket(self, near: Sequence[Mapping[str, str]]) -> bool:
        """Whether `near` is the bucket of the index the last `nearest` answered with."""
        return self._last is not None and self._last[0] is near

    def holds(self, test: Callable[[Mapping[str, str]], bool], name: str) -> bool:
        """Whether any held entry passes `test` (asked once per `name`)."""
        found = self._holds.get(name)
        if found is None:
            found = self._holds[name] = any(test(h) for h in self.held)
        return found

    def nearest(self, wanted: Mapping[str, str], order: Sequence[str]) -> Found:
        """`nearest(wanted, self.held, order)`, by the index where it answers."""
        order = tuple(order)
        if not self._textual(order) or not all(
            isinstance(wanted.get(c), str | None) for c in order
        ):
            return nearest(wanted, self.held, order)
        values = tuple(wanted.get(c) for c in order)
        for i, component in enumerate(order):
            others = values[:i] + values[i + 1 :]
            near = self._index(order, i).get(others)
            if near is None:
                continue
            exact = [h for h in near if h.get(component) == values[i]]
            if exact:  # one equal in every component: nearer than any
                return (), exact
            self._last = (near, (order, i, others))
            return (component,), near  # the first component in order that alone differs
        return nearest(wanted, self.held, order)

    def _textual(self, order: tuple[str, ...]) -> bool:
        """Whether every held value of `order`'s components is text or absent (else a
        bundle's odd value: compared by the scan, as ever)."""
        found = self._text.get(order)
        if found is None:
            found = all(isinstance(h.get(c), str | None) for h in self.held for c in order)
            self._text[order] = found
        return found

    def _index(self, order: tuple[str, ...], i: int) -> _Index:
        """The held entries by their values of `order`'s components but the `i`th (made
        when a miss first asks: the components before the one that differs)."""
        index = self._indexes.get((order, i))
        if index is None:
            index = self._indexes[(order, i)] = {}
            for h in self.held:
                values = tuple(h.get(c) for c in order)
                index.setdefault(values[:i] + values[i + 1 :], []).append(h)
        return index


_NUMBER = Pattern("[0-9]+")


def shape_distance(held: str, wanted: str) -> tuple[int, float, str]:
    """How far a held shape key is from the wanted one: keys with the same text between
    their numbers first, then by how far apart the numbers are (in ratio), then by text."""
    return _distance(_parts(held), _parts(wanted), held)


def nearest_shapes(
    held: Sequence[Mapping[str, str]],
    wanted: str,
    count: int,
    parsed: dict[str, _Parts],
    groups: Callable[[], dict[tuple[str, int], _Group]] | None = None,
) -> list[Mapping[str, str]]:
    """The first `count` of `held` by `shape_distance` of their shape to `wanted`, as
    `sorted` orders them (not all sorted: a miss of an operation of many shapes), each held
    shape parsed once into `parsed` (a listing's, for its next miss). With `groups` (the
    held by their text between numbers, `_grouped`), a shape of one number (the usual key:
    a length, a batch size) is found by bisection among those of its text, not by a scan."""
    ours = _parts(wanted)

    def distance(h: Mapping[str, str]) -> tuple[int, float, str]:
        return _distance(_parsed(h, parsed), ours, h.get("shape", ""))

    group = groups().get(ours[:2]) if groups is not None and ours[1] == 1 else None
    if group is None or len(group[0]) < count:
        return heapq.nsmallest(count, held, key=distance)
    # Every one of the same text is nearer than any other: the nearest `count` of them are
    # within a window around `wanted`'s number, widened to every one as near as the
    # window's `count`th (ties by text, as `sorted`).
    logs, entries, ours_log = group[0], group[1], ours[2][0]
    i = bisect.bisect_left(logs, ours_log)
    lo, hi = max(0, i - count), min(len(logs), i + count)
    bound = sorted(abs(x - ours_log) for x in logs[lo:hi])[count - 1]
    while lo > 0 and abs(logs[lo - 1] - ours_log) <= bound:
        lo -= 1
    while hi < len(logs) and abs(logs[hi] - ours_log) <= bound:
        hi += 1
    return heapq.nsmallest(count, entries[lo:hi], key=distance)


_Parts = tuple[str, int, tuple[float, ...]]  # its text between numbers, their count, logs
_Group = tuple[list[float], list[Mapping[str, str]]]  # one-number shapes by their log


def _parsed(h: Mapping[str, str], parsed: dict[str, _Parts]) -> _Parts:
    shape = h.get("shape", "")
    parts = parsed.get(shape)
    if parts is None:
        parts = parsed[shape] = _parts(shape)
    return parts


def _grouped(
    held: Sequence[Mapping[str, str]], parsed: dict[str, _Parts]
) -> dict[tuple[str, int], _Group]:
    """The held shapes of one number, by their text between numbers, sorted by its log."""
    found: dict[tuple[str, int], list[tuple[float, int]]] = {}
    for n, h in enumerate(held):
        parts = _parsed(h, parsed)
        if parts[1] == 1:
            found.setdefault(parts[:2], []).append((parts[2][0], n))
    groups = {}
    for name, members in found.items():
        members.sort()
        groups[name] = ([log for log, _ in members], [held[n] for _, n in members])
    return groups


def nearest_values(
    held: Sequence[Mapping[str, str]],
    shape: str,
    listed: Listed[Any] | None,
    text: Callable[[Mapping[str, str]], str],
    shown: int,
) -> str:
    """What an explanation says of `held`'s shapes (each as `text` shows it), the nearest
    to `shape` first: the first `shown` distinct, found by distance (not every one sorted
    at each miss), and how many more (counted once for a bucket of `listed`'s index)."""
    parsed = listed.shapes if listed is not None else {}
    grouped = lambda: _grouped(held, parsed)  # noqa: E731
    kept = listed is not None and listed.is_bucket(held)  # (else grouped at each miss)
    groups = (lambda: listed.said("shape groups", held, grouped)) if kept else None  # type: ignore[union-attr]

    def texts(near: Iterable[Mapping[str, str]]) -> list[str]:
        return list(dict.fromkeys(text(h) for h in near))

    count = lambda: str(len(texts(held)))  # noqa: E731
    distinct = int(listed.said("shape count", held, count) if listed is not None else count())
    first = shown
    while True:  # (a few more where the nearest show alike)
        said = texts(nearest_shapes(held, shape, first, parsed, groups))
        if len(said) >= shown or first >= len(held):
            break
        first *= 4
    more = f" (+{distinct - shown} more)" if distinct > shown else ""
    return " | ".join(said[:shown]) + more


def _parts(shape: str) -> _Parts:
    numbers = _NUMBER.findall(shape)
    return _NUMBER.sub("#", shape), len(numbers), tuple(_log(x) for x in numbers)


def _distance(held: _Parts, wanted: _Parts, text: str) -> tuple[int, float, str]:
    if held[0] != wanted[0] or held[1] != wanted[1]:
        return (1, float(abs(held[1] - wanted[1])), text)
    return (0, sum(abs(x - y) for x, y in zip(held[2], wanted[2], strict=True)), text)


def _log(digits: str) -> float:
    """ln(n + 1) of the number `digits` writes, never made an int (a bundle's number may
    have any length, past what `int()` takes or a float holds): from its first 15 digits
    and its count of digits past them."""
    digits = digits.lstrip("0")
    if len(digits) <= 15:
        return math.log(int(digits or "0") + 1)
    return math.log(int(digits[:15])) + (len(digits) - 15) * math.log(10)


_WORD = Pattern(r"[\w.+-]+")  # a number's, a dtype's, a JSON string's text
KEY_CHANGED = (
    " (no key the bundle holds for it has this one's form: did the tunable's key= change since"
    " it was warmed? then warm it again)"
)


def key_form(shape: str) -> str:
    """A tune key's form: its text, each word or number one letter (`float32[16] 16` and
    `int8[2x4] 3` are `a[a] a`, `["rows", 16]` is `["a", a]`, `16` is `a`)."""
    return _WORD.sub("a", shape)


def key_form_hint(listed: Listed[Any], shape: str) -> str:
    """`KEY_CHANGED` where no shape `listed` holds has `shape`'s form, else "" (the forms
    held made once per listing: a miss of another form reads no held shape again)."""
    forms = listed.forms
    if forms is None:
        forms = listed.forms = {key_form(h.get("shape", "")) for h in listed.held}
    return "" if key_form(shape) in forms else KEY_CHANGED


# A float a key holds (a scalar input's value, or `key=`'s): a word of digits with a point or
# an exponent, or nan/inf: none of a dtype's, a size's or a shape's (`float32[4x8]`, `3`)
_FLOAT = Pattern(r"(?<![\w.])[-+]?(?:\d+\.\d*(?:e[-+]?\d+)?|\d+e[-+]?\d+|nan|inf)(?![\w.])")
FLOAT_CHANGED = (
    " (it differs only in a float, an input keyed by its value: one that changes from run to run,"
    " drawn at random or from the clock, is another tune in every process; give the Tunable"
    " key= what its pick depends on)"
)


def float_hint(listed: Listed[Any], shape: str) -> str:
    """`FLOAT_CHANGED` where a shape `listed` holds differs from `shape` in its floats only
    (`float32[64] 0.61 64` held, `float32[64] 0.78 64` wanted), else "" (the held shapes,
    floats masked, made once per listing: each miss of a key drawn at random read them all)."""
    masked = _FLOAT.sub("#", shape)
    if masked == shape:  # (no float in it: no held key read)
        return ""
    held = listed.floatless
    if held is None:
        held = listed.floatless = {_FLOAT.sub("#", h.get("shape", "")) for h in listed.held}
    return FLOAT_CHANGED if masked in held else ""


REORDERED = (
    ' (the same options in another order: an order made from a set, `[f"-D{f}" for f in'
    " FLAGS]`, differs from process to process, so no bundle serves it; give them sorted)"
)


def reordered_hint(held: Sequence[Mapping[str, str]], wanted: str) -> str:
    """`REORDERED` where a held kernel's options (JSON lists of str) are `wanted`'s in
    another order, else "": a held text read only where it is as long as `wanted` (as the
    same options reordered are), a malformed one (nested past what Python's parser reads, a
    hostile row's) none."""
    ours = _sorted_options(wanted)
    texts = (h.get("options") for h in held)
    alike = (t for t in texts if isinstance(t, str) and len(t) == len(wanted))
    return REORDERED if ours is not None and any(_sorted_options(t) == ours for t in alike) else ""


def _sorted_options(text: str) -> list[Any] | None:
    """The options `text` lists, sorted; None where it is no JSON list of them."""
    try:
        return sorted(json.loads(text))
    except (TypeError, ValueError, RecursionError):  # (a malformed row's: no hint)
        return None
