"""Rows counted by their one value, streamed: what a bundle holds from elsewhere, by whom.

`held_elsewhere` is what a bundle holds for a backend that another toolchain built or another
device measured (`BundleCore.foreign`, read on a serving process's first miss, never on a hit).

SQL's GROUP BY holds every row's value whole in a temporary B-tree, however long a
hostile bundle makes it (even one only its `length()` is asked of): six 6 MB toolchains
made a serving process's first kernel miss hold ~66 MB more. `grouped` counts rows as
they stream instead (each value already bounded in SQL by its reader), keeping at most
`MOST` distinct values (a bundle of millions of distinct names is not held); the rows of
any others are counted together, as `OTHERS`'s, so the counts always add up to the rows.
It owns no state, reads no file but the bundle it is handed, and never prints.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from warmcli.bundle.rows import MAX_NAME_CHARS, RowReader, _name, _named
from warmcli.records import HeldElsewhere

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


def held_elsewhere(
    bundle: RowReader, backend: str, arch: str, toolchains: Iterable[str], device: str
) -> list[HeldElsewhere]:
    """What `bundle` holds for this backend that another toolchain built (for `arch`) or
    another device measured, never served here (only those rows grouped): one record per
    toolchain or device, past `grouped`'s first ones one (`by` "") for all others."""

    def by(kind: str, field: str, value: object) -> str:  # "" for `OTHERS`
        parse = lambda: _named(field, _name, value)  # noqa: E731
        return "" if value is OTHERS else bundle._parse(kind, "?", parse)

    ours, held = sorted(set(toolchains)), []
    bounded = f"SELECT CASE WHEN length({{0}}) <= {MAX_NAME_CHARS} THEN {{0}} END FROM "
    kernels = f"{bounded.format('toolchain')} kernels WHERE backend = ? AND arch = ? AND "
    mine = f"toolchain NOT IN ({', '.join('?' * len(ours))})"
    for toolchain, n in grouped(bundle._iter(kernels + mine, (backend, arch, *ours))):
        held.append(HeldElsewhere("kernel", by("kernel", "toolchain", toolchain), n, arch))
    tunes = f"{bounded.format('device')} tunes WHERE substr(device, 1, ?) = ? AND device != ?"
    for identity, n in grouped(bundle._iter(tunes, (len(backend) + 1, backend + "|", device))):
        held.append(HeldElsewhere("tune", by("tune", "device", identity), n))
    return held
