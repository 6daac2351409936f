"""Rows counted by their one value, streamed: what a bundle holds from elsewhere, by whom.

SQL's GROUP BY holds every row's value whole in a temporary B-tree, however long a
hostile bundle makes it (even one only its `length()` is asked of): six 6 MB toolchains
made a serving process's first kernel miss hold ~66 MB more. `grouped` counts rows as
they stream instead (each value already bounded in SQL by its reader), keeping at most
`MOST` distinct values (a bundle of millions of distinct names is not held); the rows of
any others are counted together, as `OTHERS`'s, so the counts always add up to the rows.
It owns no state, reads no file and never prints.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MOST = 64  # distinct values counted at most: more are not warm's (a toolchain, a device)
OTHERS = object()  # stands for every value past the first `MOST`


def grouped(rows: Iterable[tuple[Any, ...]], most: int = MOST) -> list[tuple[Any, int]]:
    """(value, how many rows hold it) of `rows` (one value each), in first-seen order: the
    first `most` distinct values, then (`OTHERS`, how many rows hold any other) if any do."""
    counts: dict[Any, int] = {}
    others = 0
    for (value,) in rows:
        if value in counts or len(counts) < most:
            counts[value] = counts.get(value, 0) + 1
        else:
            others += 1
    return [*counts.items(), *([(OTHERS, others)] if others else [])]
