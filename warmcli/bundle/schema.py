"""warm's schema of a bundle, by format: the SQL each format's tables are created with.

Format 3 (this warm's) keeps a tune's key and candidate-set checksum as their 32
bytes (BLOB; a reader sees them as hex, `warmcli.bundle.rows` converts at the
boundary), its status as a small code (`TUNE_STATUSES`), its candidates packed with
their kernel keys interned (`warmcli.bundle.candidates`), and each such kernel key
once in `tune_kernels` (an id to its 32 bytes; never renumbered, never reused).
Format 2 held keys, checksums and statuses as text and each candidate's kernel
key whole; format 1 also held the candidates as JSON text (with a narrower index).
`SCHEMAS` gives each readable format's schema with and without the `signatures`
table (a bundle made before signatures existed has none); `declared_schema`, the
`sqlite_master` rows a schema's text declares, and `schema_problems`, what a bundle's rows
hold that they do not, or lack (what `warmcli.bundle.file` refuses). This module owns no
state but `declared_schema`'s memo (one entry a schema text: a handful) and runs no SQL
(`warmcli.bundle.file` creates and checks; `warmcli.bundle.migrate` rebuilds an older
bundle's tunes).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

FORMAT_VERSION = 3  # 1: candidates JSON; 2: keys as hex text (both read, migrated on a write open)
TUNE_STATUSES = ("measured", "pending")  # a tune's status as stored (format 3): its index
# SQL: a tune's status as text, whichever way it is stored; and as format 3 stores it
STATUS_TEXT = (
    "CASE status "
    + " ".join(f"WHEN {code} THEN '{name}'" for code, name in enumerate(TUNE_STATUSES))
    + " ELSE status END"
)
STATUS_CODE = (
    "CASE status "
    + " ".join(f"WHEN '{name}' THEN {code}" for code, name in enumerate(TUNE_STATUSES))
    + " ELSE status END"
)


def statements(script: str) -> list[str]:
    """A schema script's statements, one by one: run inside the caller's transaction
    (`executescript` would commit it first). The schema holds no `;` in a literal."""
    return [s for s in script.split(";") if s.strip()]


SCHEMA = """
CREATE TABLE manifest (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE fingerprints (
    identity TEXT PRIMARY KEY, kind TEXT NOT NULL, data TEXT NOT NULL);
CREATE TABLE blobs (sha256 TEXT PRIMARY KEY, size INTEGER NOT NULL, data BLOB NOT NULL);
CREATE TABLE kernels (
    key TEXT PRIMARY KEY, device TEXT NOT NULL, backend TEXT NOT NULL, arch TEXT NOT NULL,
    entry TEXT NOT NULL, label TEXT NOT NULL, symbol TEXT NOT NULL,
    sha256 TEXT NOT NULL REFERENCES blobs(sha256), toolchain TEXT NOT NULL,
    components TEXT NOT NULL, compile_log TEXT NOT NULL, seconds REAL NOT NULL,
    created REAL NOT NULL, last_used REAL NOT NULL);
CREATE INDEX kernels_entry ON kernels(entry);
"""
TUNES_SCHEMA = """
CREATE TABLE tunes (
    key BLOB PRIMARY KEY, operation TEXT NOT NULL, shape_key TEXT NOT NULL,
    device TEXT NOT NULL, checksum BLOB NOT NULL, status INTEGER NOT NULL, pick TEXT,
    candidates BLOB NOT NULL, seconds REAL NOT NULL, measured_at REAL NOT NULL,
    updated REAL NOT NULL);
CREATE INDEX tunes_operation ON tunes(operation, device, status);
CREATE TABLE tune_kernels (id INTEGER PRIMARY KEY, key BLOB NOT NULL UNIQUE);
"""
_FORMAT2_TUNES = (
    TUNES_SCHEMA.replace("key BLOB PRIMARY KEY", "key TEXT PRIMARY KEY")
    .replace("checksum BLOB", "checksum TEXT")
    .replace("status INTEGER", "status TEXT")
    .split("CREATE TABLE tune_kernels")[0]
)
SIGNATURES_SCHEMA = """
CREATE TABLE signatures (
    key_id TEXT PRIMARY KEY, public_key BLOB NOT NULL, signature BLOB NOT NULL,
    rows BLOB NOT NULL, signed_at REAL NOT NULL);
"""
BASE_SCHEMA = SCHEMA + TUNES_SCHEMA  # what a bundle made before signatures existed holds
SCHEMA = BASE_SCHEMA + SIGNATURES_SCHEMA  # part of warm's schema; optional in an older bundle
_FORMAT2 = (
    SCHEMA.replace(TUNES_SCHEMA, _FORMAT2_TUNES),
    BASE_SCHEMA.replace(TUNES_SCHEMA, _FORMAT2_TUNES),
)
# Each format's schema, with and without signatures (1: candidates text, a smaller index).
SCHEMAS: dict[int, tuple[str, ...]] = {
    FORMAT_VERSION: (SCHEMA, BASE_SCHEMA),
    2: _FORMAT2,
    1: tuple(
        s.replace("candidates BLOB", "candidates TEXT").replace(", device, status)", ")")
        for s in _FORMAT2
    ),
}


@functools.cache
def declared_schema(script: str) -> frozenset[tuple[object, ...]]:
    """`warmcli.bundle.file.warm_schema(script)` read from the script's text without SQLite
    (each table and index as written; a table's automatic index for each PRIMARY KEY that is
    not its rowid and each UNIQUE): a bundle holding exactly these rows is warm's, checked
    without building the schema in memory (~1 ms). A test holds it equal to `warm_schema`."""
    rows: set[tuple[object, ...]] = set()
    for statement in map(str.strip, statements(script)):
        _, kind, name, rest = statement.split(None, 3)
        if kind == "INDEX":  # CREATE INDEX name ON table(columns)
            rows.add(("index", name, rest.split()[1].split("(")[0], statement))
            continue
        rows.add(("table", name, name, statement))
        keys = rest.count("PRIMARY KEY") - rest.count("INTEGER PRIMARY KEY") + rest.count("UNIQUE")
        rows.update(
            ("index", f"sqlite_autoindex_{name}_{n}", name, None) for n in range(1, keys + 1)
        )
    return frozenset(rows)


def schema_problems(
    rows: Iterable[tuple[object, ...]], expected: frozenset[tuple[object, ...]]
) -> list[str]:
    """What a bundle's `sqlite_master` `rows` hold that `expected` does not, or lack."""
    actual = frozenset(rows)
    names = {(row[0], row[1]) for row in actual}
    ours = {(row[0], row[1]) for row in expected}
    problems = [
        f"{kind} {str(name)[:60]!r} is not as warm creates it"
        if (kind, name) in ours
        else f"{kind} {str(name)[:60]!r} on {str(table)[:60]!r} is not warm's"
        for kind, name, table, _ in sorted(actual - expected, key=repr)
    ]
    problems += [
        f"no {kind} {name!r}"
        for kind, name, _, _ in sorted(expected, key=repr)
        if (kind, name) not in names
    ]
    return problems
