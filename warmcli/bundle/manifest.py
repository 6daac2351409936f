"""A bundle's manifest: its few rows read bounded, each checked, and what is wrong with them.

warm writes four rows (`MANIFEST_FIELDS`: its format and version, the created and
updated times); `MANIFEST_SELECT` reads at most `MANIFEST_ROWS` + 1 of them, each
value no longer than a name (else NULL, named), so a manifest of millions of rows or
of huge values costs no memory: `BundleAdmin.manifest` refuses one of more rows.
`manifest_problems` says what `warm verify` finds wrong in one read (a field missing,
a time that is no finite number, a format that is not the header's). This module owns
no state, opens no file and never prints.
"""

from __future__ import annotations

import math

from warmcli.bundle.file import FORMAT_VERSION
from warmcli.bundle.rows import (
    MAX_NAME_CHARS,
    _bounded_select,
    _name,
    _named,
    _text,
    _within_limits,
)

MANIFEST_FIELDS = ("format_version", "warm_version", "created", "updated")
MANIFEST_ROWS = 64  # warm writes 4: a manifest of more is refused, never read whole
MANIFEST_SELECT = (
    f"{_bounded_select((('key', MAX_NAME_CHARS), ('value', MAX_NAME_CHARS)), 'manifest')} "
    f"ORDER BY rowid LIMIT {MANIFEST_ROWS + 1}"
)


def _manifest_row(row: tuple[object, ...]) -> tuple[str, str]:
    """A row of `MANIFEST_SELECT`, checked: (key, value)."""
    key, value = _within_limits(row)
    return _named("key", _name, key), _named("value", _text, value)


def manifest_problems(manifest: dict[str, str], schema: int | None = None) -> list[str]:
    """What is wrong with a bundle's manifest: a field missing, a time or version wrong
    (not `schema`, the header's format version: a format-1 bundle read as it is says 1)."""
    schema = FORMAT_VERSION if schema is None else schema
    problems = [f"manifest has no {name!r}" for name in MANIFEST_FIELDS if name not in manifest]
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
