"""A listing that meets a value longer than warm reads fails naming the entry that holds it.

SQLite refuses to load any value over `MAX_VALUE_BYTES` (`RowReader._reading`), even
for `length()` of a text (this SQLite has no `octet_length`), so a listing's select
stops at such a row with SQLite's "too big", which names no row (so does SQLite's
own check of an index holding one). `named` passes a listing's rows through and turns
that error into a `BundleError` naming the first entry (in rowid order) that holds such
a value, its column and its size in bytes (`refused`: any read's error so), found
without loading any value: `typeof()` and an incremental blob handle's length
(`Connection.blobopen`, Python 3.11+, the versions that set the limit) read only the
record's header. Where none is found, the error stays SQLite's. It owns no state,
never writes and never prints.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable, Iterator
from typing import Any

from warmcli.bundle.rows import MAX_NAME_CHARS, MAX_VALUE_BYTES, RowReader, _corrupt, _Malformed
from warmcli.errors import BundleError

TOO_BIG = "string or blob too big"  # SQLite's words for a value over its length limit
TABLES = {"kernel": "kernels", "tune": "tunes"}


def named(reader: RowReader, what: str, rows: Iterable[tuple[Any, ...]]) -> Iterator[Any]:
    """`rows` of a listing of `what` ("kernel" or "tune"); SQLite's refusal of a value too
    long becomes a `BundleError` naming the entry that holds it (see the module doc)."""
    try:
        yield from rows
    except BundleError as exc:
        raise refused(reader, exc, (what,)) from None


def refused(
    reader: RowReader, exc: BundleError, whats: tuple[str, ...] = ("kernel", "tune")
) -> BundleError:
    """`exc`, or where it is SQLite's refusal of a value too long, a `BundleError` naming
    the first entry of `whats` that holds one (its key, column and size)."""
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
        columns = [str(c[1]) for c in conn.execute(f"PRAGMA table_info({table})")]
        columns = [c for c in columns if '"' not in c]  # as warm names them: quoted as is
        kinds = ", ".join(f'typeof("{c}")' for c in columns)
        for rowid, *types in conn.execute(f"SELECT rowid, {kinds} FROM {table} ORDER BY rowid"):
            for column, kind in zip(columns, types, strict=True):
                if kind not in ("text", "blob"):
                    continue
                with conn.blobopen(table, column, rowid, readonly=True) as blob:
                    size = len(blob)
                if size > MAX_VALUE_BYTES:
                    problem = f"{column}: {size} bytes, longer than warm reads, not read"
                    return _key(conn, table, rowid), problem
    return None


def _key(conn: sqlite3.Connection, table: str, rowid: int) -> str:
    """A row's key as a listing names it (hex where it is stored as 32 bytes); "?" if it
    cannot be read."""
    with contextlib.suppress(sqlite3.Error):
        row = conn.execute(f"SELECT typeof(key) FROM {table} WHERE rowid = ?", (rowid,))
        kind = row.fetchone()[0]
        if kind in ("text", "blob"):
            with conn.blobopen(table, "key", rowid, readonly=True) as blob:
                if len(blob) <= MAX_NAME_CHARS:
                    raw = blob.read()
                    if kind == "blob" and len(raw) == 32:
                        return raw.hex()
                    return raw.decode("utf-8", "replace")
    return "?"
