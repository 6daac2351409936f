"""The kernel and tune rows no listing can read: a value longer than warm reads, a text
that is not UTF-8, or a key that is not one a listing names a row by (not hex).

Such a row stops a listing's select itself (SQLite refuses to load the value; Python
refuses to decode the text), so the row cannot be parsed and named as other malformed
rows are. `unreadable_rows` finds every one of a table in one pass in rowid order, never
loading an oversized value (SQLite refuses it: the scan goes on past that row, and
`typeof()` and an incremental blob handle's length name the column and its size without
reading it) and never decoding a text in Python unless SQL says it holds a byte that is
not ASCII, or a NUL (then its bytes, within the limit, are decoded). A repair
(`warm verify`, `warm clean`) has its reader skip them (`skip_unreadable`,
`RowReader.skip_rows`), names each by its key (`_key`, shown escaped) and removes it by its
rowid (if its key is still the one read): a key that is not hex or not UTF-8 too;
`warmcli.bundle.oversize` names the first for a listing that meets one. Serving never
reads them (`Bundle.kernel`, `Bundle.tune` take one row, and a row they cannot read is a
miss). It owns no state, never writes and never prints.
"""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING

from warmcli.bundle.file import _retrying
from warmcli.bundle.rows import MAX_NAME_CHARS, MAX_VALUE_BYTES, _corrupt, _Malformed
from warmcli.errors import BundleError

if TYPE_CHECKING:
    from warmcli.bundle.rows import RowReader

TABLES = {"kernel": "kernels", "tune": "tunes"}
TOO_BIG = "string or blob too big"  # SQLite's words for a value over its length limit
NOT_UTF8 = "Could not decode to UTF-8"  # Python's, for a text that is not UTF-8
_NOT_ASCII = "*[^\x01-\x7f]*"  # a text SQL cannot vouch for: its bytes are decoded
SCAN_BATCH = 256
KEY_BYTES = 128  # a longer key is not kept: its row is removed by its rowid alone
_HEX_TEXT = "typeof(key) = 'text' AND length(key) = 64 AND NOT key GLOB '*[^0-9a-f]*'"
_BAD_KEY = {  # SQL: whether a row's key is not one a listing can name it by (hex)
    "kernel": f"NOT ({_HEX_TEXT})",
    "tune": f"NOT ({_HEX_TEXT} OR typeof(key) = 'blob' AND length(key) = 32)",  # any format
}
_KEY_PROBLEM = {"kernel": "key: not a sha256 in hex", "tune": "key: not a tune key"}


@dataclass(frozen=True)
class Unreadable:
    """One row of `kernels` or `tunes` no listing can read."""

    what: str  # "kernel" or "tune"
    rowid: int
    key: str  # as a listing names it (hex of a tune's 32 bytes); "?" where unreadable
    problem: str  # `_corrupt`'s line naming it
    raw_key: bytes | None  # its key's stored bytes (up to `KEY_BYTES`: removed only if still so)


def unreadable_rows(reader: RowReader, what: str) -> list[Unreadable]:
    """Every row of `what`'s table (`TABLES`) that holds a value longer than warm reads, a
    text that is not UTF-8 or a key a listing cannot name it by, in rowid order."""
    table = TABLES[what]
    conn = reader._conn
    found: list[Unreadable] = []
    with reader._reading():
        columns = table_columns(conn, table)
        # each text is measured (so SQLite refuses an oversized one) and read only when
        # SQL cannot say it is ASCII (a NUL in it: `length()` stops there)
        reads = ", ".join(
            f"""CASE WHEN typeof("{c}") = 'text' AND (length("{c}") != length(CAST("{c}" AS BLOB))
            OR "{c}" GLOB :ascii) THEN CAST("{c}" AS BLOB) END"""
            for c in columns
        )
        sql = f"SELECT rowid, {_BAD_KEY[what]}, {reads} FROM {table} WHERE rowid > :last"
        last, oversized = -(1 << 63), ""  # rowids processed; those found oversized, listed
        while True:
            try:
                cursor = _retrying(
                    reader.fspath,
                    lambda n=last, sql=f"{sql} AND rowid NOT IN ({oversized}) ORDER BY rowid": (
                        conn.execute(sql, {"ascii": _NOT_ASCII, "last": n})
                    ),
                )
                try:
                    while rows := cursor.fetchmany(SCAN_BATCH):
                        for rowid, bad_key, *values in rows:
                            last = rowid
                            bad = _not_utf8(columns, values)
                            problem = f"{bad}: not UTF-8" if bad else bad_key and _KEY_PROBLEM[what]
                            if problem:
                                found.append(_unreadable(conn, what, rowid, problem))
                finally:
                    cursor.close()
                return sorted(found, key=lambda u: u.rowid)
            except sqlite3.Error as exc:  # a value SQLite refuses to load, past `last`
                if TOO_BIG not in str(exc):
                    raise
                rowid, problem = _next_oversized(conn, table, last, oversized)
                found.append(_unreadable(conn, what, rowid, problem))
                oversized += f",{rowid}" if oversized else str(rowid)


def _next_oversized(conn: sqlite3.Connection, table: str, last: int, known: str) -> tuple[int, str]:
    """The first row past `last` (not among `known`) holding a value longer than warm
    reads, and what is too long; SQLite's refusal again if there is none."""
    rows = conn.execute(
        f"SELECT rowid FROM {table} WHERE rowid > ? AND rowid NOT IN ({known}) ORDER BY rowid",
        (last,),
    )
    for (rowid,) in rows:  # (rowids only; the first past `last` is likely the one)
        problem = _oversized(conn, table, rowid)
        if problem is not None:
            return rowid, problem
    raise sqlite3.DataError(TOO_BIG)


def _not_utf8(columns: list[str], values: list[object]) -> str | None:
    """The first column whose bytes (read where SQL could not vouch for them) are not UTF-8."""
    for column, value in zip(columns, values, strict=True):
        if isinstance(value, bytes):
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                return column
    return None


def _oversized(conn: sqlite3.Connection, table: str, rowid: int) -> str | None:
    """Which value of the row at `rowid` is longer than warm reads, and its size in bytes,
    read from the record's header only."""
    columns = table_columns(conn, table)
    kinds = ", ".join(f'typeof("{c}")' for c in columns)
    types = conn.execute(f"SELECT {kinds} FROM {table} WHERE rowid = ?", (rowid,)).fetchone()
    for column, kind in zip(columns, types or (), strict=False):
        if kind in ("text", "blob"):
            with contextlib.suppress(sqlite3.Error, ValueError):
                with conn.blobopen(table, column, rowid, readonly=True) as blob:
                    size = len(blob)
                if size > MAX_VALUE_BYTES:
                    return too_long(column, size)
    return None


def table_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    """`table`'s columns, those warm names (quoted as they are: none holds a quote)."""
    columns = [str(c[1]) for c in conn.execute(f"PRAGMA table_info({table})")]
    return [c for c in columns if '"' not in c]


def too_long(column: str, size: int) -> str:
    """The problem of a value of `size` bytes in `column`, longer than warm reads."""
    return f"{column}: {size} bytes, longer than warm reads, not read"


def _unreadable(conn: sqlite3.Connection, what: str, rowid: int, problem: str) -> Unreadable:
    key = _key(conn, TABLES[what], rowid)
    raw: bytes | None = None
    with contextlib.suppress(sqlite3.Error, ValueError):
        with conn.blobopen(TABLES[what], "key", rowid, readonly=True) as blob:
            raw = blob.read() if len(blob) <= KEY_BYTES else None
    line = _corrupt(what, key if key != "?" else None, _Malformed(problem))
    return Unreadable(what, rowid, key[:64], line, raw)


def unreadable_error(exc: BundleError) -> bool:
    """Whether `exc` is a listing's refusal of a row `unreadable_rows` finds (named or not)."""
    return any(w in str(exc) for w in ("longer than warm reads", "not UTF-8", NOT_UTF8, TOO_BIG))


def skip_unreadable(reader: RowReader) -> list[Unreadable]:
    """Find every unreadable kernel and tune row and have `reader`'s listings skip them
    (`RowReader.skip_rows`); the rows found, kernels first."""
    try:
        found = [u for what in TABLES for u in unreadable_rows(reader, what)]
    except sqlite3.Error as exc:
        raise BundleError(f"{reader.fspath}: corrupt bundle ({exc})") from None
    for what, table in TABLES.items():
        reader.skip_rows(table, [u.rowid for u in found if u.what == what])
    return found


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
                    if kind == "blob":  # as `KEY_HEX` reads it
                        return raw.hex()
                    return raw.decode("utf-8", "replace")
    return "?"
