"""Migrating a bundle of format 1 or 2 to this warm's format, once, on its first open for write.

Format 1 stored each tune's candidates as JSON text; format 2 stored them packed with every
kernel key whole, and a tune's key, checksum and status as text. Format 3
(`warmcli.bundle.schema`) stores the key and checksum as their 32 bytes, the status as a code,
and the candidates packed with their kernel keys interned in `tune_kernels`. `migrate` rebuilds
the `tunes` table in one SQLite write transaction (so a crash leaves the old format whole, and
another process that migrated first is seen and left alone): rows keep their rowids and order,
and the header's and manifest's format version are set. A value that is not what warm writes (a
key not a sha256 in hex, a status not warm's, candidates not warm's or over `MAX_PACKED_BYTES`)
is copied as it is and stays a corrupt entry for the reader to name; one tune held twice, under
its key as hex text and as its bytes, cannot be (`TWICE`: the migration fails, rolled back,
saying so). Rows are copied by SQL (`_copy`), bit for bit but for the values Python
converts (bound: a text not UTF-8 is never read by Python, which cannot write it back as text),
never in a SQL function: an interrupt (a Ctrl-C, or a SIGTERM warm's handler raises as one)
that lands in a function SQLite calls is only "user-defined function raised exception" to it,
read as a corrupt bundle. A bundle holding signatures keeps every row's candidates as they are:
its signatures cover them as signed (a signature covers a key, checksum and status as text,
whichever way they are stored, see `warmcli.bundle.signed.SIGNED_ROWS`; the reader reads every
form), so migrating never unsigns an entry; rows written after are format 3's. It never
re-signs: the manifest's format version it sets is not the one signed, so each signature is stale
(`warmcli.bundle.signing.stale`: `warm verify` says so, trusted keys refuse the bundle) until
the bundle is signed again. A read-only open never migrates (an older format is read as it is).
This module owns no state and opens no file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from warmcli.bundle.candidates import MAX_PACKED_BYTES, as_bytes, decode, pack
from warmcli.bundle.schema import STATUS_CODE, statements

TWICE = "a tune key held twice, as its 32 bytes and as hex text (warm verify names it)"
_COLUMNS = (
    "rowid, key, operation, shape_key, device, checksum, status, pick, candidates, "
    "seconds, measured_at, updated"
)
# Each row is copied by SQL, bit for bit, but for the values Python converts (bound; NULL
# where one is kept): a text that is not UTF-8 is copied as it is (Python cannot read it). Python
# reads only what it may convert (a key or checksum of 64 characters, candidates of at most
# `MAX_PACKED_BYTES`, none where signed), and holds `_BATCH_BYTES` of them at most.
_CONVERTED = (
    "SELECT rowid, CASE WHEN length(key) = 64 THEN key END, "
    "CASE WHEN length(checksum) = 64 THEN checksum END, "
    f"CASE WHEN ? THEN NULL WHEN length(candidates) <= {MAX_PACKED_BYTES} THEN candidates END "
    "FROM tunes_before ORDER BY rowid"
)
_BATCH_ROWS, _BATCH_BYTES = 1000, 16 << 20
# (plain `?`s, never numbered ones: Python 3.12.1's sqlite3 warns of those, gh-117995)
_INSERT = (
    f"INSERT INTO tunes ({_COLUMNS}) SELECT rowid, coalesce(?, key), operation, shape_key, "
    f"device, coalesce(?, checksum), {STATUS_CODE}, pick, coalesce(?, candidates), seconds, "
    "measured_at, updated FROM tunes_before WHERE rowid = ?"
)


def _packer(interned: dict[bytes, int]) -> Callable[[object], object]:
    def repack(value: object) -> object:
        """`value`'s candidates in format 3's form, or `value` itself where not warm's."""
        try:
            candidates = decode(value)
            return pack(candidates, lambda key: interned.setdefault(key, len(interned) + 1))
        except (ValueError, KeyError, TypeError, OverflowError):
            return value

    return repack


class _Undecodable(bytes):
    """A text value that is not UTF-8, as read for the migration (never converted)."""


def _text(raw: bytes) -> object:
    """How the migration reads a text value: a `str`, or `_Undecodable` where it is not UTF-8
    (copied as it is by SQL, never by Python, which cannot bind it as text)."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return _Undecodable(raw)


def _converted(row: tuple[object, ...], repack: Callable[[object], object]) -> list[object]:
    """A format 1 or 2 row's (rowid, key, checksum, candidates) as `_INSERT` binds them: its
    key and checksum in hex as their bytes, its candidates repacked; None for a value kept
    as it is (or not read: `_CONVERTED`)."""
    rowid, key, checksum, candidates = row
    values = (as_bytes(key), as_bytes(checksum), repack(candidates))
    kept = (key, checksum, candidates)
    return [*(None if new is was else new for new, was in zip(values, kept, strict=True)), rowid]


def _copy(conn: sqlite3.Connection, repack: Callable[[object], object], signed: bool) -> None:
    """Every row of `tunes_before` into `tunes`, converted, in batches (see `_CONVERTED`)."""
    batch: list[list[object]] = []
    held = 0
    for row in conn.execute(_CONVERTED, (signed,)):  # (not a SQL function: see the module doc)
        batch.append(_converted(row, repack))
        held += sum(len(v) for v in batch[-1][:3] if isinstance(v, bytes))
        if len(batch) == _BATCH_ROWS or held > _BATCH_BYTES:
            conn.executemany(_INSERT, batch)
            batch, held = [], 0
    conn.executemany(_INSERT, batch)


def migrate(conn: sqlite3.Connection, version: int, tunes_schema: str) -> None:
    """Bring the bundle open on `conn` (in autocommit) to format `version`, whose `tunes`
    table, index and `tune_kernels` table `tunes_schema` creates (see the module doc)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] != version:
            signed = (
                conn.execute(
                    "SELECT count(*) FROM sqlite_master WHERE name = 'signatures'"
                ).fetchone()[0]
                and conn.execute("SELECT 1 FROM signatures LIMIT 1").fetchone()
            )
            interned: dict[bytes, int] = {}
            repack = _packer(interned)
            conn.execute("DROP INDEX tunes_operation")
            conn.execute("ALTER TABLE tunes RENAME TO tunes_before")
            for statement in statements(tunes_schema):
                conn.execute(statement)
            conn.text_factory = _text  # (before the first row is read, until the last)
            try:
                _copy(conn, repack, bool(signed))
            except sqlite3.IntegrityError:  # (format 3's key is its bytes: one key, one row)
                raise sqlite3.IntegrityError(TWICE) from None
            finally:
                conn.text_factory = str
            conn.executemany(
                "INSERT INTO tune_kernels (id, key) VALUES (?, ?)",
                [(i, key) for key, i in interned.items()],
            )
            conn.execute("DROP TABLE tunes_before")
            conn.execute(f"PRAGMA user_version = {int(version)}")
            conn.execute(
                "UPDATE manifest SET value = ? WHERE key = 'format_version'", (str(version),)
            )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
