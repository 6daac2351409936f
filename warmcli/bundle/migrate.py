"""Migrating a bundle of format 1 to this warm's format, once, on its first open for write.

Format 1 stored each tune's candidates as JSON text; format 2 stores them packed
(`warmcli.bundle.candidates`) in a BLOB column. `migrate` rebuilds the `tunes` table
in one SQLite write transaction (so a crash leaves format 1 whole, and another
process that migrated first is seen and left alone): rows keep their rowids and
order, each candidates text becomes its packed form, and the header's and
manifest's format version are set. A text that is not what warm writes (or over
`MAX_PACKED_BYTES`) is copied as it is and stays a corrupt entry for the reader to
name. A bundle holding signatures keeps every row's candidates as they are: its
signatures cover the rows as signed (the reader reads both forms), so migrating
never unsigns a row; rows written after are packed. A read-only open never migrates
(format 1 is read as it is). This module owns no state and opens no file.
"""

from __future__ import annotations

import sqlite3

from warmcli.bundle.candidates import MAX_PACKED_BYTES, decode, pack

_COLUMNS = (
    "rowid, key, operation, shape_key, device, checksum, status, pick, candidates, "
    "seconds, measured_at, updated"
)


def pack_json(text: object) -> object:
    """`text`'s candidates packed, or `text` itself where it is not warm's JSON."""
    try:
        return pack(decode(text)) if isinstance(text, str) else text
    except (ValueError, KeyError, TypeError, OverflowError):
        return text


def migrate(conn: sqlite3.Connection, version: int, tunes_schema: str) -> None:
    """Bring the bundle open on `conn` (in autocommit) to format `version`, whose `tunes`
    table and index `tunes_schema` creates (see the module doc)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        if conn.execute("PRAGMA user_version").fetchone()[0] != version:
            signed = (
                conn.execute(
                    "SELECT count(*) FROM sqlite_master WHERE name = 'signatures'"
                ).fetchone()[0]
                and conn.execute("SELECT 1 FROM signatures LIMIT 1").fetchone()
            )
            conn.create_function("warm_pack", 1, pack_json, deterministic=True)
            value = (
                "candidates"
                if signed
                else f"CASE WHEN length(candidates) <= {MAX_PACKED_BYTES} "
                "THEN warm_pack(candidates) ELSE candidates END"
            )
            conn.execute("DROP INDEX tunes_operation")
            conn.execute("ALTER TABLE tunes RENAME TO tunes_format1")
            for statement in filter(str.strip, tunes_schema.split(";")):
                conn.execute(statement)
            conn.execute(
                f"INSERT INTO tunes ({_COLUMNS}) SELECT "
                f"{_COLUMNS.replace('candidates', value)} FROM tunes_format1 ORDER BY rowid"
            )
            conn.execute("DROP TABLE tunes_format1")
            conn.execute(f"PRAGMA user_version = {int(version)}")
            conn.execute(
                "UPDATE manifest SET value = ? WHERE key = 'format_version'", (str(version),)
            )
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
