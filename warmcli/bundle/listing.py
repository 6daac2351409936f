"""Every tune of a large bundle read and converted by several processes, in `each_tune`'s
order (`warm stats --json`).

Reading and checking every tune (`Bundle.each_tune`) is most of what a listing of a
large bundle costs, and each row is read on its own. `converted_tunes` splits the
tunes, in their listing order (operation, then shape), into ranges of about
`RANGE_TUNES` at boundaries of that order (equal operation and shape stay in one
range), and lets up to `MAX_WORKERS` forked processes each open the bundle read-only,
read one range through the bundle's own reader (`_tune_record`, as `each_tune`) and
return `convert` of each tune: the caller gets them in order, at most two ranges a
worker ahead of what it has consumed, so memory stays that of a few ranges. The
caller's read transaction (`snapshot`) is held the whole time, so no writer commits
meanwhile and every process reads the same state; a range whose worker fails or finds
the path naming another file is read by the caller (so a corrupt row raises the
`BundleError` naming it where it stands in the order, after the rows before it, as
`each_tune` does). Tunes of equal operation and shape come in SQLite's order, as in
`each_tune`. It returns
None (read it in one process) for a bundle of fewer than `PARALLEL_TUNES` tunes, or
where processes cannot be used (`warmcli.bundle.checking`). It owns no state beyond the
processes of one listing, never writes and never prints.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from warmcli.bundle.checking import PARALLEL_TUNES, _identity, _workers
from warmcli.bundle.rows import RowReader
from warmcli.bundle.tune_row import TUNE_SELECT, _tune_record
from warmcli.records import TuneRecord

MAX_WORKERS = 4  # each holds a range's text: a few processes are most of the gain
RANGE_TUNES = 2_000
Bound = tuple[Any, Any] | None  # (operation, shape) a range ends at (None: no end)
_ORDER = "operation, shape_key"


def _between(bundle: RowReader, low: Bound, high: Bound) -> Iterator[TuneRecord]:
    """The tunes after `low` up to and with `high`, in listing order (`each_tune`'s)."""
    where, params = [], []
    if low is not None:
        where.append(f"({_ORDER}) > (?, ?)")
        params += low
    if high is not None:
        where.append(f"({_ORDER}) <= (?, ?)")
        params += high
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    rows = bundle._iter(f"{TUNE_SELECT} {clause} ORDER BY {_ORDER}", tuple(params))
    return bundle._each("tune", lambda row: _tune_record(row, bundle._kernel_key), rows, None)


def _convert_range(
    opener: Any, path: str, ident: tuple[int, int], low: Bound, high: Bound, convert: Any
) -> list[Any] | None:
    """In a worker: `convert` of each tune of one range, or None if `path` is no longer
    the file the caller holds open."""
    if _identity(path) != ident:
        return None
    with opener.open(path) as bundle, bundle.snapshot():
        if _identity(path) != ident:
            return None
        return [convert(t) for t in _between(bundle, low, high)]


def _bounds(bundle: RowReader, count: int) -> list[Bound]:
    """Every `RANGE_TUNES`-th (operation, shape) of the listing order, as range ends."""
    step = max(RANGE_TUNES, 1)
    rows = bundle._all(
        f"SELECT operation, shape_key FROM (SELECT {_ORDER}, row_number() OVER "
        f"(ORDER BY {_ORDER}) AS n FROM tunes) WHERE n % ? = 0 ORDER BY {_ORDER}",
        (step,),
    )
    ends: list[Bound] = []
    for row in rows:
        if not ends or ends[-1] != tuple(row):
            ends.append(tuple(row))
    return [*ends, None] if count else []


def converted_tunes(bundle: Any, convert: Callable[[TuneRecord], Any]) -> Iterator[Any] | None:
    """`convert` of every tune of the open `bundle`, in `each_tune`'s order, made by
    several processes; None where it is better read in this one (see the module doc).
    `convert` must be a module's own function (it is named to the workers)."""
    workers = min(_workers(), MAX_WORKERS)
    count = bundle.count("tunes")
    if workers < 2 or count < PARALLEL_TUNES:
        return None
    nulls = bundle._one("SELECT 1 FROM tunes WHERE operation IS NULL OR shape_key IS NULL")
    if nulls is not None:  # no range would hold such a row: read it in one process
        return None
    return _listed(bundle, convert, workers, count)


def _listed(
    bundle: Any, convert: Callable[[TuneRecord], Any], workers: int, count: int
) -> Iterator[Any]:
    with bundle.snapshot():  # the shared lock: no writer commits until the last range
        ends = _bounds(bundle, count)
        ranges = iter(zip([None, *ends[:-1]], ends, strict=True))
        path = str(bundle.path)
        ident = _identity(path)
        import multiprocessing  # a listing of a large bundle only: never paid on open

        pool = multiprocessing.get_context("fork").Pool(workers)
        pending: deque[tuple[Bound, Bound, Any]] = deque()
        try:
            while True:
                for low, high in itertools.islice(ranges, 2 * workers - len(pending)):
                    args = (type(bundle), path, ident, low, high, convert)
                    pending.append((low, high, pool.apply_async(_convert_range, args)))
                if not pending:
                    return
                low, high, result = pending.popleft()
                try:
                    done = result.get()
                except Exception:  # read here: a corrupt row raises where it stands
                    done = None
                if done is None:  # the worker could not read it
                    yield from (convert(t) for t in _between(bundle, low, high))
                else:
                    yield from done
        finally:
            pool.terminate()
            pool.join()
