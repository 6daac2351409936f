"""What a table shows of a tune's candidates (`warm stats`): their order (`by_median`), the
first of them a table lists (`first_shown`: `LISTED` by median and the pick, however many a
tune holds: a packed row of 4 KB may hold 246,000; none keeps its samples), and the pick's
figures, read from all of them (`figures`), a median and a ratio of two as text of bounded
width (`micros`, `times_slower`, both `timed`: a row's times are untrusted, up to 2^993 s;
a kernel's compile time alike, `compile_time`), and the line of a candidate's reason it
shows (`reason_shown`). Pure presentation over candidates, records' or their JSON documents'
(and kernels' times); it owns no state and never prints.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from typing import Any

from warmcli.errors import headline
from warmcli.printable import LISTED, cut
from warmcli.records import CandidateMeasurement

SHOWN_REASON = 1000  # characters of a reason's line a table shows
SCANNED_REASON = 64 << 10  # characters of a reason read for that line
LONG_SECONDS = 3600.0  # a median of this or more is shown in seconds, not every µs digit
LONG_RATIO = 1e6  # a ratio of this or more is shown in three digits and an exponent
LONG_COMPILE = 1e6  # a compile time of this many seconds or more: likewise


def by_median(c: Any) -> tuple[bool, float]:
    """A candidate's place in a table (a record's, or its JSON document's): by median,
    those with none last."""
    seconds = c["seconds"] if isinstance(c, dict) else c.seconds
    return seconds is None, seconds or 0


def first_shown(
    candidates: Sequence[CandidateMeasurement], pick: str | None
) -> list[CandidateMeasurement]:
    """The candidates a table lists: the first `LISTED` by median, and the pick where it is
    not among them (a table lists the pick); each without its samples, which no table shows
    (a row of 7 KB may inflate to 500,000: a listing of 100 such tunes held 2 GB of them)."""
    first = heapq.nsmallest(LISTED, candidates, key=by_median)
    if pick is not None and not any(c.name == pick for c in first):
        first += [c for c in candidates if c.name == pick][:1]
    return [
        CandidateMeasurement(c.name, c.kernel_key, c.status, c.seconds, (), c.reason) for c in first
    ]


def reason_shown(reason: str) -> str:
    """The line of a candidate's reason a table shows (`headline`, of its first
    `SCANNED_REASON` characters), cut to `SHOWN_REASON` characters saying the line's length
    (`cut`; the table shows it whole, not a cell's cut of it): a reason may inflate to
    4 MiB from a row of 4 KB, and a listing holds 20,000 tunes' shown candidates."""
    return cut(headline(reason[:SCANNED_REASON]), SHOWN_REASON) if reason else ""


def figures(
    pick: str | None, candidates: Iterable[tuple[str, str, float | None]]
) -> tuple[str, str]:
    """The pick's median, and how much slower the runner-up is, of (name, status, median)."""
    ok = [(name, s) for name, status, s in candidates if status == "ok" and s is not None]
    times = heapq.nsmallest(2, (s for _, s in ok))
    picked = next((s for name, s in ok if name == pick), None)
    runner = times_slower(times[1] / times[0]) if len(times) > 1 and times[0] > 0 else "-"
    return micros(picked), runner


def micros(seconds: float | None) -> str:
    """A median in microseconds; one of hours or more (a bundle's row may say up to 2^993 s)
    in seconds, as `1e+200 s`: every digit of it would widen a table by hundreds."""
    if seconds is None:
        return "-"
    return f"{seconds * 1e6:,.1f} µs" if seconds < LONG_SECONDS else f"{seconds:.3g} s"


def timed(seconds: float | None, ratio: float | None) -> tuple[str, str]:
    """A candidate's median and its ratio to the pick's (`-` for none), as a table shows them."""
    return micros(seconds), "-" if ratio is None else times_slower(ratio)


def times_slower(ratio: float) -> str:
    """A ratio of two medians, `1.35×`; one of a million or more (a hostile row's: 1e-300 s
    beside 1e-10 s) as `1e+290×`."""
    return f"{ratio:.2f}×" if ratio < LONG_RATIO else f"{ratio:.3g}×"


def compile_time(seconds: float) -> str:
    """A kernel's compile time in seconds, `0.058 s`, its unit said as a median's is; one of a
    million or more (a bundle's row may say any finite time: 1e200) as `1e+200 s`, not every
    digit of it."""
    return f"{seconds:.3f} s" if seconds < LONG_COMPILE else f"{seconds:.3g} s"
