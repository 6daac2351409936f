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
test (`holds`). `shape_distance` says how near a tune's held shape is to the one wanted.
Its answers are those of the scan. It owns only those memos, never reads
a bundle itself and never prints.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Generic, TypeVar

from warmcli.printable import Pattern

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
        self._said: dict[tuple[str, _BucketName], str] = {}
        self._holds: dict[str, bool] = {}

    def said(
        self, component: str, near: Sequence[Mapping[str, str]], say: Callable[[], str]
    ) -> str:
        """`say()`, what is said of `component` in `near`: once for a bucket of the index
        (the same nearest entries at each miss), else every time."""
        last = self._last
        if last is None or last[0] is not near:
            return say()
        text = self._said.get((component, last[1]))
        if text is None:
            text = self._said[(component, last[1])] = say()
        return text

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
    a, b = _NUMBER.findall(held), _NUMBER.findall(wanted)
    same_text = _NUMBER.sub("#", held) == _NUMBER.sub("#", wanted)
    if not same_text or len(a) != len(b):
        return (1, float(abs(len(a) - len(b))), held)
    return (0, sum(abs(_log(x) - _log(y)) for x, y in zip(a, b, strict=True)), held)


def _log(digits: str) -> float:
    """ln(n + 1) of the number `digits` writes, never made an int (a bundle's number may
    have any length, past what `int()` takes or a float holds): from its first 15 digits
    and its count of digits past them."""
    digits = digits.lstrip("0")
    if len(digits) <= 15:
        return math.log(int(digits or "0") + 1)
    return math.log(int(digits[:15])) + (len(digits) - 15) * math.log(10)
