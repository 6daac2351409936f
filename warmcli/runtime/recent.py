"""`Recent`: a memo of the most recently used entries, at most `size`, the least recent dropped.

A serving process that tunes over dynamic shapes reaches a new tune key per distinct size: a
memo of every one it was served would grow for as long as the process lives (~1.8 kB a tune of
two candidates; 10,000 sizes, 18 MB). What this memo keeps is only what its owner can make
again: a tune's row in the bundle the process opened (`TuneCache`: read again at its next use,
the same row), or the runtime's verdict that a pick's build is served here (`Runtime._kept`:
asked again). What a process measured itself is never kept only here (`TuneCache` holds it
apart, for good: the pick it launched, its write-back). As CuPy's and Triton's in-memory caches
are keyed, the hit costs one dict move and one read (~0.1 µs beyond a plain dict's).

It takes no lock (`TuneCache` calls it under its own; `Runtime._kept` does not): each step is one
C-level `OrderedDict` operation, atomic under the GIL for `str` keys, and a `get` that finds its
key dropped by another thread meanwhile answers None (a miss: the owner makes it again). It owns
only its entries; it never reads a bundle.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")

TUNES_KEPT = 4096
"""How many tunes served from a bundle a device's runtime keeps in memory (~7 MB at two
candidates a tune), in its `TuneCache` and in its memo of their builds' verdicts alike: the
README's "A long-running service" says so."""


class Recent(Generic[V]):
    """At most `size` entries by `str` key, the least recently used dropped first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[str, V] = OrderedDict()

    def get(self, key: str) -> V | None:
        entries = self._entries
        try:
            entries.move_to_end(key)
        except KeyError:
            return None
        return entries.get(key)  # (None where another thread dropped it meanwhile)

    def put(self, key: str, value: V) -> None:
        entries = self._entries
        entries[key] = value
        try:
            entries.move_to_end(key)
        except KeyError:  # dropped by another thread's `put` meanwhile: kept no more
            return
        while len(entries) > self.size:
            try:
                entries.popitem(last=False)
            except KeyError:  # emptied by other threads' drops meanwhile
                break

    def __len__(self) -> int:
        return len(self._entries)
