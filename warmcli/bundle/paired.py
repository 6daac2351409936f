"""Two streams of a bundle's entries ordered by key, paired by key: `warm diff`'s join of two
bundles (`warmcli.ops.diff`) and a push's comparison with the store's bundle
(`warmcli.bundle.fast_forward`). An entry is a tuple whose first item is its key (`Bundle.keys`'
rows, a diff's `Key`). It owns no state and reads nothing but the two streams it is given.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

_E = TypeVar("_E", bound=tuple[Any, ...])


def joined(a: Iterable[_E], b: Iterable[_E]) -> Iterator[tuple[_E | None, _E | None]]:
    """Two streams ordered by key, paired by key: (x, None), (None, y) or (x, y)."""
    ia, ib = iter(a), iter(b)
    x, y = next(ia, None), next(ib, None)
    while x is not None or y is not None:
        if y is None or (x is not None and x[0] < y[0]):
            yield x, None
            x = next(ia, None)
        elif x is None or y[0] < x[0]:
            yield None, y
            y = next(ib, None)
        else:
            yield x, y
            x, y = next(ia, None), next(ib, None)
