"""Every tune of a large bundle read and converted by several processes, in `each_tune`'s
order (`warm stats --json`).

Reading and checking every tune (`Bundle.each_tune`) is most of what a listing of a
large bundle costs, and each row is read on its own. `converted_tunes` splits the
tunes, in their listing order (operation, then shape), into ranges of about
`RANGE_TUNES`: whole operations, counted by SQL's index of operations (no row read),
and an operation of more tunes than that at every `RANGE_TUNES`-th of its shapes
(equal operation and shape stay in one range). Up to `MAX_WORKERS` forked processes
(`warmcli.bundle.workers`) each open the bundle read-only, read one range through the
bundle's own checks (`laid_tunes`: `parsed_tunes`' checks, as `each_tune`, with no object
made for each candidate of a document whose layout it knows) and return `convert` of its tunes
(one item a range, as a worker makes it: a range's text, so the caller does no work a
tune); the first ranges start as `converted_tunes` returns (they are read while the
caller writes what comes before the tunes), and the caller gets them in order, at most
two ranges a worker ahead of what it has consumed, so memory stays that of a few ranges.
The caller's read transaction (`snapshot`) is held the whole time, so no writer commits
meanwhile and every process reads the same state; a range whose worker fails, dies or
finds the path naming another file is read by the caller, `convert` of each tune on its own
(so a corrupt row raises the `BundleError` naming it where it stands in the order,
after the rows before it, as `each_tune` does). Tunes of equal operation and shape
come in SQLite's order, as in `each_tune`. It returns None (read it in one process) for
a bundle of fewer than `PARALLEL_TUNES` tunes, or where processes cannot be used. It
owns no state beyond the processes of one listing, never writes and never prints.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from warmcli.bundle.checking import PARALLEL_TUNES
from warmcli.bundle.oversize import refused
from warmcli.bundle.rows import RowReader
from warmcli.bundle.tune_layout import LaidTune, laid_tunes
from warmcli.bundle.tune_row import TUNE_ORDER, TUNE_SELECT, parsed_tunes
from warmcli.bundle.workers import Reopen, Workers, worker_count
from warmcli.errors import BundleError
from warmcli.records import TuneRecord

MAX_WORKERS = 4  # each holds a range's text: a few processes are most of the gain
RANGE_TUNES = 2_000
# Where a range ends: (operation, shape), or (operation, None) after its last shape;
# None: no end.
Bound = tuple[Any, Any] | None
Convert = Callable[[Iterable[TuneRecord | LaidTune]], Any]


def _after(bound: tuple[Any, Any], low: bool) -> tuple[str, list[Any]]:
    """SQL of the rows after a low `bound`, or up to and with a high one."""
    operation, shape = bound
    if shape is None:
        return f"operation {'>' if low else '<='} ?", [operation]
    return f"({TUNE_ORDER}) {'>' if low else '<='} (?, ?)", [operation, shape]


def _between(
    bundle: RowReader, low: Bound, high: Bound, laid: bool = False
) -> Iterator[TuneRecord | LaidTune]:
    """The tunes after `low` up to and with `high`, in listing order (`each_tune`'s); read
    by their layouts (`laid_tunes`), if `laid`."""
    where, params = [], []
    for bound, is_low in ((low, True), (high, False)):
        if bound is not None:
            sql, values = _after(bound, is_low)
            where.append(sql)
            params += values
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    rows = bundle._iter(f"{TUNE_SELECT} {clause} ORDER BY {TUNE_ORDER}", tuple(params))
    return (laid_tunes if laid else parsed_tunes)(bundle, rows, None)


def _convert_range(
    source: Reopen, low: Bound, high: Bound, convert: Convert
) -> tuple[int, Any] | None:
    """In a worker: (how many tunes, `convert` of them) of one range, or None if the
    bundle's path is no longer the file the caller holds open."""
    seen = 0

    def counted(bundle: RowReader) -> Iterator[TuneRecord]:
        nonlocal seen
        for tune in _between(bundle, low, high, True):  # by layout (`laid_tunes`)
            seen += 1
            yield tune

    done = source.read(lambda bundle: convert(counted(bundle)))
    return None if done is None else (seen, done)


def _bounds(bundle: RowReader) -> list[Bound]:
    """The ends of the ranges, in listing order (see the module doc); the last is None."""
    ends: list[Bound] = []
    held, previous = 0, None  # tunes of whole operations since the last end, the last one
    counts = bundle._all("SELECT operation, count(*) FROM tunes GROUP BY 1 ORDER BY 1")
    for operation, count in counts:
        if held and held + count > RANGE_TUNES:
            ends.append((previous, None))
            held = 0
        if count > RANGE_TUNES:
            ends += [*_shapes(bundle, operation), (operation, None)]
        else:
            held += count
        previous = operation
    return [*ends, None]


def _shapes(bundle: RowReader, operation: object) -> list[Bound]:
    """Every `RANGE_TUNES`-th shape of one operation's, in listing order, as range ends."""
    rows = bundle._all(
        "SELECT shape_key FROM (SELECT shape_key, row_number() OVER (ORDER BY shape_key) "
        "AS n FROM tunes WHERE operation = ?) WHERE n % ? = 0 ORDER BY shape_key",
        (operation, max(RANGE_TUNES, 1)),
    )
    ends: list[Bound] = []
    for (shape,) in rows:
        if not ends or ends[-1] != (operation, shape):
            ends.append((operation, shape))
    return ends


def converted_tunes(bundle: Any, convert: Convert) -> Iterator[Any] | None:
    """`convert` of the tunes of each range of the open `bundle` (a range's at a time;
    ranges in `each_tune`'s order), made by several processes; None where it is better
    read in this one (see the module doc). `convert` must be a module's own function (it
    is named to the workers); it is given one tune at a time where the caller reads them."""
    workers = min(worker_count(), MAX_WORKERS)
    count = bundle.count("tunes")
    if workers < 2 or count < PARALLEL_TUNES:
        return None
    try:  # an operation too long to read: named (`refused`), as a listing names it
        nulls = bundle._one("SELECT 1 FROM tunes WHERE operation IS NULL OR shape_key IS NULL")
        if nulls is not None:  # no range would hold such a row: read it in one process
            return None
        listed = _listed(bundle, convert, workers)
        next(listed)  # the first ranges are read now, while the caller writes what comes first
    except BundleError as exc:
        raise refused(bundle, exc, ("tune",)) from None
    return listed


def _listed(bundle: Any, convert: Convert, workers: int) -> Iterator[Any]:
    """None once the first ranges are started, then each range's `convert`, in order."""
    with bundle.snapshot():  # the shared lock: no writer commits until the last range
        ends = _bounds(bundle)
        ranges = iter(itertools.pairwise([None, *ends]))
        source = Reopen.of(bundle)
        started = Workers(workers)
        pending: deque[tuple[Bound, Bound, Any]] = deque()
        first = True
        try:
            while True:
                for low, high in itertools.islice(ranges, 2 * workers - len(pending)):
                    args = (source, low, high, convert)
                    pending.append((low, high, started.submit(_convert_range, *args)))
                if first:  # the first ranges are being read: the caller goes on meanwhile
                    first = False
                    yield None
                    continue
                if not pending:
                    return
                low, high, result = pending.popleft()
                done = started.done(result)
                if done is None:  # the worker could not read it (or died): each tune here
                    yield from (convert((t,)) for t in _between(bundle, low, high))
                elif done[0]:  # a range of no tune gives nothing
                    yield done[1]
        finally:
            started.stop()
