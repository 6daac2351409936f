"""What a bundle says of itself: its manifest and fingerprints, read bounded, each row checked.

warm writes four manifest rows (`MANIFEST_FIELDS`: its format and version, the created
and updated times; a run adds `run`, `warmcli.bundle.run_record`) and a fingerprint for
each device and toolchain that wrote entries (a few, short). `MANIFEST_SELECT` and
`FINGERPRINT_SELECT` read at most `MANIFEST_ROWS` and `FINGERPRINT_ROWS` rows + 1, each
value no longer than its limit (else NULL, named; a fingerprint's data parsed only where it is
a flat object, `flat_json.flat`), so a table of millions of rows or of
huge values costs no memory or time: `BundleAdmin.manifest` and `fingerprints` refuse
one of more rows, so `put_fingerprint` (a writer's) adds none past `FINGERPRINT_ROWS`.
`metadata_problems` says what `warm verify` finds wrong in their rows: each corrupt
row, named in the words `warm stats` refuses the bundle with (`BundleAdmin.manifest`,
`fingerprints`), and `manifest_problems` of the rest (a field missing, a time that is
no finite number, a format that is not the header's). `fingerprint_row` turns a
fingerprint read back into what `put_fingerprint` takes. This module owns
no state, opens no file (it writes one row into a writer's open transaction) and never prints.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections.abc import Collection, Iterator, Sequence

from warmcli.bundle import flat_json
from warmcli.bundle.file import FORMAT_VERSION
from warmcli.bundle.rows import (
    MAX_NAME_CHARS,
    _bounded_select,
    _corrupt,
    _json_object,
    _Malformed,
    _name,
    _named,
    _text,
    _within_limits,
)

MANIFEST_FIELDS = ("format_version", "warm_version", "created", "updated")
MANIFEST_ROWS = 64  # warm writes 5: a manifest of more is refused, never read whole
MANIFEST_SELECT = (
    f"{_bounded_select((('key', MAX_NAME_CHARS), ('value', MAX_NAME_CHARS)), 'manifest')} "
    f"ORDER BY rowid LIMIT {MANIFEST_ROWS + 1}"
)


def _finite(text: str) -> float:
    """A JSON number as a float; `ValueError` where it is none (1e999: no JSON number)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is out of range")
    return value


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")  # NaN, Infinity: what `json.dumps` would write back


# JSON as the standard has it: what a document warm shows as JSON (a fingerprint) is read with
_STANDARD_JSON = json.JSONDecoder(parse_float=_finite, parse_constant=_no_constant).decode


def _flat_json(text: str) -> object:
    """A fingerprint's data as `_STANDARD_JSON` reads it, or None (no object) where it is not
    a flat object as warm writes it (`flat_json.flat`: its containers never held)."""
    return _STANDARD_JSON(text) if flat_json.flat(text) else None


FINGERPRINT_ROWS = 1024  # one per device and toolchain that wrote entries
FINGERPRINT_DATA_CHARS = 4 * MAX_NAME_CHARS  # a fingerprint: a few names and a path
FINGERPRINT_SELECT = (
    _bounded_select(
        (("identity", MAX_NAME_CHARS), ("kind", MAX_NAME_CHARS), ("data", FINGERPRINT_DATA_CHARS)),
        "fingerprints",
    )
    + f" ORDER BY kind, identity LIMIT {FINGERPRINT_ROWS + 1}"
)


# One fingerprint stored, its identity's replaced; a new one while fewer are held than a
# reader takes (counted no further than that: a hostile bundle may hold millions).
_PUT_FINGERPRINT = (
    "INSERT OR REPLACE INTO fingerprints SELECT ?, ?, ? WHERE ? IN (SELECT identity FROM "
    f"fingerprints) OR (SELECT count(*) FROM (SELECT 1 FROM fingerprints LIMIT "
    f"{FINGERPRINT_ROWS})) < {FINGERPRINT_ROWS}"
)


def put_fingerprint(conn: sqlite3.Connection, identity: str, kind: str, data: str) -> None:
    """Store one fingerprint in `conn`'s open transaction, replacing its identity's; a new
    identity only while the bundle holds fewer than `FINGERPRINT_ROWS`, which every reader
    refuses to exceed (past them a device or toolchain goes unnamed; its entries are stored
    all the same, each naming its own)."""
    conn.execute(_PUT_FINGERPRINT, (identity, kind, data, identity))


def fingerprint_row(fp: dict[str, object]) -> tuple[str, str, str]:
    """A fingerprint as `BundleAdmin.fingerprints` reads it, as `put_fingerprint` takes it:
    (identity, kind, the rest as JSON)."""
    data = {k: v for k, v in fp.items() if k not in ("identity", "kind")}
    return str(fp["identity"]), str(fp["kind"]), json.dumps(data, sort_keys=True)


def _manifest_row(row: tuple[object, ...]) -> tuple[str, str]:
    """A row of `MANIFEST_SELECT`, checked: (key, value)."""
    key, value = _within_limits(row)
    return _named("key", _name, key), _named("value", _text, value)


def _fingerprint(row: tuple[object, ...]) -> dict[str, object]:
    """A row of `FINGERPRINT_SELECT`, checked: its JSON object with its identity and kind."""
    identity, kind, data = _within_limits(row)
    parsed = _json_object(_named("data", _text, data), _flat_json)  # shown as JSON
    return {
        "identity": _named("identity", _name, identity),
        "kind": _named("kind", _name, kind),
        **parsed,
    }


def metadata_problems(
    manifest_rows: Sequence[tuple[object, ...]],
    fingerprint_rows: Sequence[tuple[object, ...]],
    schema: int | None = None,
) -> Iterator[str]:
    """What `warm verify` finds wrong in the rows of `MANIFEST_SELECT` and
    `FINGERPRINT_SELECT`: each corrupt row named as reading it names it (`warm stats`
    refuses the bundle in those words), then `manifest_problems` of the rest."""
    manifest: dict[str, str] = {}
    corrupt: set[object] = set()
    for row in manifest_rows:
        try:
            key, value = _manifest_row(row)
        except _Malformed as exc:
            corrupt.add(row[0])
            yield _corrupt("manifest", row[0], exc)
            continue
        manifest[key] = value
    yield from manifest_problems(manifest, schema, named=corrupt)
    for row in fingerprint_rows:
        try:
            _fingerprint(row)
        except _Malformed as exc:
            yield _corrupt("fingerprint", row[0], exc)


def manifest_problems(
    manifest: dict[str, str], schema: int | None = None, named: Collection[object] = ()
) -> list[str]:
    """What is wrong with a bundle's manifest: a field missing, a time or version wrong
    (not `schema`, the header's format version: a format-1 bundle read as it is says 1);
    the fields in `named` (their rows already named corrupt) left out."""
    schema = FORMAT_VERSION if schema is None else schema
    problems = [
        f"manifest has no {name!r}"
        for name in MANIFEST_FIELDS
        if name not in manifest and name not in named
    ]
    for name in ("created", "updated"):
        try:
            finite = math.isfinite(float(manifest.get(name, "0")))
        except ValueError:
            finite = False
        if not finite:
            problems.append(f"manifest {name!r} is not a time: {manifest[name]!r}")
    if manifest.get("format_version", str(schema)) != str(schema):
        problems.append(
            f"manifest says format {manifest['format_version']}, the schema is {schema}"
        )
    return problems
