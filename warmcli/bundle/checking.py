"""Every tune row of a large bundle checked by several processes at once (`warm verify`).

Reading and checking every tune (`Bundle.each_tune`: its candidates unpacked, every
field and its key checked) is most of what `warm verify` spends on a large bundle,
and each row is checked on its own. `TuneChecks` starts, for a bundle of at least
`PARALLEL_TUNES` tunes on a machine with more than one CPU, one forked process per
CPU (`warmcli.bundle.workers`); each opens the bundle read-only, reads one range of rowids through
`tunes_between` (the same reader and checks as `each_tune`) and returns how many rows
it read and every problem, in order, with the keys of those rows (`TuneChecks`, which
tells them to an `on_corrupt` given it). The caller's open read transaction (`snapshot`)
holds SQLite's shared lock the whole time, so no writer can commit meanwhile and every
process reads the same state (a bundle is never in WAL mode); a worker that finds the
path now names another file (replaced meanwhile), or fails or dies, leaves its range
(and a dead one every range not yet done) to be checked here.
The ranges are started before the caller checks everything else, and their results are
yielded in rowid order: the report is the one a check in one process makes. Where
`fork` is not what starts processes, or threads are running, all is checked here. It
owns no state beyond the processes of one call and never writes or prints.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from warmcli.bundle.rows import OnError
from warmcli.bundle.workers import Reopen, Workers, worker_count

PARALLEL_TUNES = 20_000  # fewer tunes than this are checked in this process
Checks = Iterator[tuple[str, str | None]]


class Tunes(Protocol):
    """What this module reads of an open bundle (`Bundle` is one)."""

    path: Any

    def count(self, table: str) -> int: ...

    def rowid_span(self, table: str) -> tuple[int, int]: ...

    def tunes_between(self, low: int, high: int, on_error: OnError) -> Iterable[object]: ...


def checked(what: str, listing: Callable[[OnError], Iterable[object]]) -> Checks:
    """(what, problem or None) of each row of a listing, in the order it met them."""
    bad: list[str] = []
    for _ in listing(lambda _key, problem: bad.append(problem)):
        yield from ((what, b) for b in bad)
        bad.clear()
        yield what, None
    yield from ((what, b) for b in bad)


def keyed(bad: OnError, on_corrupt: Callable[[str], None] | None) -> OnError:
    """`bad`, telling `on_corrupt` (if any) each corrupt entry's key first."""
    if on_corrupt is None:
        return bad
    return lambda key, problem: (on_corrupt(key), bad(key, problem))[-1]


def _check_range(source: Reopen, low: int, high: int) -> tuple[int, list[str], list[str]] | None:
    """In a worker: (rows read, their problems, the keys of those rows) of the tunes with
    rowid in (low, high], or None if the bundle's path is no longer the file the caller
    holds open."""

    def check(bundle: Any) -> tuple[int, list[str], list[str]]:
        rows, problems, keys = 0, [], []
        between = lambda bad: bundle.tunes_between(low, high, keyed(bad, keys.append))  # noqa: E731
        for _, problem in checked("tune", between):
            rows += 1
            if problem is not None:
                problems.append(problem)
        return rows, problems, keys

    return source.read(check)


class TuneChecks:
    """Every tune of an open bundle being checked: iterate it once for
    ("tune", problem or None) of every row, in rowid order (each corrupt one's key told to
    `on_corrupt`, if given); `close` stops the processes."""

    def __init__(
        self,
        bundle: Tunes,
        here: Callable[[OnError], Iterable[object]],
        on_corrupt: Callable[[str], None] | None = None,
    ) -> None:
        self._bundle, self._on_corrupt = bundle, on_corrupt
        self._here = lambda bad: here(keyed(bad, on_corrupt))
        self._pool: Workers | None = None
        self._ranges: list[tuple[int, int, Any]] = []
        workers = worker_count()
        if workers < 2 or bundle.count("tunes") < PARALLEL_TUNES:
            return
        low, high = bundle.rowid_span("tunes")
        chunks = workers * 2
        bounds = [low - 1 + (high - low + 1) * i // chunks for i in range(chunks + 1)]
        source = Reopen.of(bundle)
        self._pool = Workers(workers)
        try:
            for a, b in itertools.pairwise(bounds):
                self._ranges.append((a, b, self._pool.submit(_check_range, source, a, b)))
        except BaseException:  # Ctrl-C meanwhile: no caller holds this to close it
            self.close()
            raise

    def __iter__(self) -> Checks:
        if self._pool is None:
            yield from checked("tune", self._here)
            return
        try:
            for a, b, result in self._ranges:
                done = Workers.done(result)  # a worker that failed or died: read here
                if done is None:
                    yield from checked("tune", lambda bad, a=a, b=b: self._between(a, b, bad))
                    continue
                rows, problems, keys = done
                for key in keys if self._on_corrupt is not None else ():
                    self._on_corrupt(key)
                yield from (("tune", p) for p in problems)
                yield from (("tune", None) for _ in range(rows - len(problems)))
        finally:
            self.close()

    def _between(self, low: int, high: int, on_error: OnError) -> Iterable[object]:
        return self._bundle.tunes_between(low, high, keyed(on_error, self._on_corrupt))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.stop()
            self._pool = None
