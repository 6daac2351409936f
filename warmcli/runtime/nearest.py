"""The nearest held entries to a missed one, found without comparing against each per miss.

`nearest` scores every held entry (the components it differs in from the one wanted,
in a given order) and keeps the closest: fewest differing components, then those
differing earliest in the order. `Listed` is one kernel entry's or tunable operation's
held entries as a miss listed them, kept by its caller (`warmcli.runtime.misses`) for
the next miss of the same entry, so a workload that misses many builds of one entry
name lists its rows once, not once a miss: it answers `nearest` by an index of the held
entries on all components but one (the usual miss differs in one: a kernel's defines or
source, a tune's shape), built on the first miss that asks for an order, and by the
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
# component -> (the other components' values -> the held entries with them, in held order)
_Index = dict[str, dict[tuple[str | None, ...], list[Mapping[str, str]]]]


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
        self._indexes: dict[tuple[str, ...], _Index | None] = {}
        self._buckets: dict[int, list[Mapping[str, str]]] = {}  # id -> an index's bucket
        self._said: dict[tuple[str, int], str] = {}
        self._holds: dict[str, bool] = {}

    def said(
        self, component: str, near: Sequence[Mapping[str, str]], say: Callable[[], str]
    ) -> str:
        """`say()`, what is said of `component` in `near`: once for a bucket of the index
        (the same nearest entries at each miss), else every time."""
        if self._buckets.get(id(near)) is not near:
            return say()
        text = self._said.get((component, id(near)))
        if text is None:
            text = self._said[(component, id(near))] = say()
        return text

    def holds(self, test: Callable[[Mapping[str, str]], bool], name: str) -> bool:
        """Whether any held entry passes `test` (asked once per `name`)."""
        found = self._holds.get(name)
        if found is None:
            found = self._holds[name] = any(test(h) for h in self.held)
        return found

    def nearest(self, wanted: Mapping[str, str], order: Sequence[str]) -> Found:
        """`nearest(wanted, self.held, order)`, by the index where it answers."""
        index = self._index(tuple(order))
        if index is None or not all(isinstance(wanted.get(c), str | None) for c in order):
            return nearest(wanted, self.held, order)
        values = tuple(wanted.get(c) for c in order)
        for i, component in enumerate(order):
            near = index[component].get(values[:i] + values[i + 1 :])
            if near is None:
                continue
            exact = [h for h in near if h.get(component) == values[i]]
            if exact:  # one equal in every component: nearer than any
                return (), exact
            return (component,), near  # the first component in order that alone differs
        return nearest(wanted, self.held, order)

    def _index(self, order: tuple[str, ...]) -> _Index | None:
        if order in self._indexes:
            return self._indexes[order]
        index: _Index | None = {c: {} for c in order}
        for h in self.held:
            values = tuple(h.get(c) for c in order)
            if not all(isinstance(v, str | None) for v in values):
                index = None  # (a bundle's odd component: compared by the scan, as ever)
                break
            for i, component in enumerate(order):
                bucket = index[component].setdefault(values[:i] + values[i + 1 :], [])
                bucket.append(h)
                self._buckets[id(bucket)] = bucket
        self._indexes[order] = index
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
