"""A listing that meets a value longer than warm reads fails naming the entry that holds it.

SQLite refuses to load any value over `MAX_VALUE_BYTES` (`RowReader._reading`), even
for `length()` of a text (this SQLite has no `octet_length`), so a listing's select
stops at such a row with SQLite's "too big", which names no row (so does SQLite's
own check of an index holding one). `each_named` parses a listing's rows (the one way
every listing of kernels or tunes does) and turns that error into a `BundleError` naming
the first entry (in rowid order) that holds such a value, its column and its size in
bytes (`refused`: any read's error so; a text not UTF-8, that Python refused, named as
`warmcli.bundle.unreadable` finds it), found without loading any value: `typeof()` and
an incremental blob handle's length (`Connection.blobopen`, Python 3.11+, the versions
that set the limit) read only the record's header. Where none is found, the error stays
SQLite's. It owns no state, never writes and never prints.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from warmcli.bundle.rows import (
    MAX_NAME_CHARS,
    MAX_VALUE_BYTES,
    OnError,
    RowReader,
    _corrupt,
    _Malformed,
)
from warmcli.bundle.unreadable import (
    NOT_UTF8,
    TOO_BIG,
    _key,
    table_columns,
    too_long,
    unreadable_rows,
)
from warmcli.errors import BundleError

TABLES = {"kernel": "kernels", "tune": "tunes"}


_T = TypeVar("_T")


def each_named(
    reader: RowReader,
    what: str,
    parse: Callable[[tuple[Any, ...]], _T],
    rows: Iterable[tuple[Any, ...]],
    on_error: OnError | None,
) -> Iterator[_T]:
    """The records `parse` makes of `rows`, a listing of `what` ("kernel" or "tune") read
    by `reader`: a row that is not what warm writes is a `BundleError` naming it, or with
    `on_error` handed to it (its key and the problem) and skipped; SQLite's refusal of a
    value too long, a `BundleError` naming the entry that holds it (see the module doc)."""
    for row in _named(reader, what, rows):
        try:
            record = parse(row)
        except _Malformed as exc:
            if on_error is None:
                raise BundleError(f"{reader.path}: {_corrupt(what, row[0], exc)}") from None
            on_error(str(row[0])[:MAX_NAME_CHARS], _corrupt(what, row[0], exc))
            continue
        yield record
        del record  # not held while the next is made (a tune's may be 30 MB)


def _named(reader: RowReader, what: str, rows: Iterable[tuple[Any, ...]]) -> Iterator[Any]:
    """`rows`, SQLite's refusal of a value too long (met fetching them) named by `refused`."""
    try:
        yield from rows
    except BundleError as exc:
        raise refused(reader, exc, (what,)) from None


def refused(
    reader: RowReader, exc: BundleError, whats: tuple[str, ...] = ("kernel", "tune")
) -> BundleError:
    """`exc`, or where it is SQLite's refusal of a value too long, a `BundleError` naming
    the first entry of `whats` that holds one (its key, column and size)."""
    if NOT_UTF8 in str(exc):  # a text Python cannot decode: named as the scan names it
        for what in whats:
            found = [u for u in unreadable_rows(reader, what) if "not UTF-8" in u.problem]
            if found:
                return BundleError(f"{reader.path}: {found[0].problem}")
    if TOO_BIG not in str(exc):
        return exc
    for what in whats:
        found = _oversized(reader, TABLES[what])
        if found is not None:
            key, problem = found
            return BundleError(f"{reader.path}: {_corrupt(what, key, _Malformed(problem))}")
    return exc


def _oversized(reader: RowReader, table: str) -> tuple[str, str] | None:
    """(key, what is too long) of the first row of `table` holding a value longer than
    warm reads, or None (none, or this Python cannot tell)."""
    conn = reader._conn
    with reader._lock, contextlib.suppress(sqlite3.Error, AttributeError, ValueError):
        columns = table_columns(conn, table)
        kinds = ", ".join(f'typeof("{c}")' for c in columns)
        for rowid, *types in conn.execute(f"SELECT rowid, {kinds} FROM {table} ORDER BY rowid"):
            for column, kind in zip(columns, types, strict=True):
                if kind not in ("text", "blob"):
                    continue
                with conn.blobopen(table, column, rowid, readonly=True) as blob:
                    size = len(blob)
                if size > MAX_VALUE_BYTES:
                    return _key(conn, table, rowid), too_long(column, size)
    return None
