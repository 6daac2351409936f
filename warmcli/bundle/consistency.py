"""Whether a bundle's SQL indexes agree with its rows: the verdict every reader that lists
a bundle shares (`warm stats`, `diff`, `check`, `merge`, `clean`, `sign`).

A listing reads the rows by a scan of their table, a lookup by key reads an index: where
the two disagree (a row missing from its index, an index entry that names no row or a
stale value, two rows of one key beside a unique index), one reader would count a row
another cannot find, and a bundle would look sound to one command and not to another.
`index_problems` compares each index of warm's schema (`warmcli.bundle.file` checked that
the file holds no other) entry by entry with its table's rows (their indexed columns and
rowid, both ways, by SQL's `EXCEPT`: no row is held in Python), and each unique index's
columns for repeats; `twin_keys` finds a tune key held twice, in its two forms (a lookup
reads either); `require_consistent` raises the one-line `BundleError` naming the first
problem, once the manifest, fingerprints and signatures are counted (`require_few`: more rows
than their readers read is a corrupt bundle), so a bundle that `warm stats` or `warm verify`
refuses for their count every other reader refuses alike, in the same words (a malformed row
of them is each reader's to judge: `warm check` serves entries, which none of them holds).
`warm verify` finds the same through SQLite's own `PRAGMA integrity_check`.
`require_well_formed` reads every row a listing reads (a kernel's times too), one at a
time and none kept, raising the `BundleError` naming the first malformed one: what `warm
stats` of a bundle too large to list (of its kernels) and `warm sign` say of it (a
listing, a merge say the same as they read it). `_agree` first compares a fingerprint of
an index with one of its rows (two aggregate scans); only where they differ do the
`EXCEPT`s run. This module owns no state, never writes and never prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from warmcli.errors import BundleError

if TYPE_CHECKING:
    from warmcli.bundle.rows import RowReader
    from warmcli.bundle.store import Bundle

INCONSISTENT = "inconsistent bundle"


def _quoted(name: object) -> str:
    return '"' + str(name).replace('"', '""') + '"'


def index_problems(reader: RowReader) -> list[str]:
    """What each index of the open bundle says that its table's rows do not (see the
    module doc), one line each; [] when they agree. Call it inside `snapshot`."""
    problems: list[str] = []
    indexes = reader._all(
        "SELECT name, tbl_name FROM sqlite_master WHERE type = 'index' ORDER BY tbl_name, name"
    )
    for name, table in indexes:
        columns = [str(r[2]) for r in reader._all(f"PRAGMA index_info({_quoted(name)})")]
        unique = any(
            r[1] == name and r[2] for r in reader._all(f"PRAGMA index_list({_quoted(table)})")
        )
        if not columns:
            continue
        listed = ", ".join(_quoted(c) for c in columns)
        if _agree(reader, name, table, columns) and not (
            unique and _repeated(reader, table, columns, f"INDEXED BY {_quoted(name)}")
        ):
            continue
        scan = f"SELECT {listed}, rowid FROM {_quoted(table)} NOT INDEXED"
        by_index = f"SELECT {listed}, rowid FROM {_quoted(table)} INDEXED BY {_quoted(name)}"
        missing = reader._one(f"SELECT count(*) FROM ({scan} EXCEPT {by_index})")
        stale = reader._one(f"SELECT count(*) FROM ({by_index} EXCEPT {scan})")
        if missing and missing[0]:
            problems.append(f"{missing[0]} row(s) of {table} missing from its index {name}")
        if stale and stale[0]:
            problems.append(f"index {name} holds {stale[0]} entry(ies) no row of {table} has")
        repeated = _repeated(reader, table, columns, "NOT INDEXED") if unique else 0
        if repeated:
            problems.append(
                f"{repeated} {', '.join(columns)} value(s) of {table} held by more than one row"
            )
    return problems


# SQL: a tune key's forms, in the order SQLite's key index holds them (text, then blobs)
_TEXT_KEYS, _BLOB_KEYS = "key >= '' AND key < x''", "key >= x''"


def twin_keys(reader: RowReader) -> list[str]:
    """A line saying how many tunes the bundle holds twice, under one key as its 32 bytes
    and as hex text (a lookup by key reads either form, `tune_row.BY_KEY`: which row a
    process serves would be SQLite's choice, and a format-1 or 2 bundle's migration could
    never write both), if any; else []. warm writes one form in each format: where the
    key's index holds no text key or no blob (two lookups) nothing more is read; else each
    blob key is looked up as text. Call it inside `snapshot`."""
    for keys in (_TEXT_KEYS, _BLOB_KEYS):
        if not reader._one(f"SELECT EXISTS (SELECT 1 FROM tunes WHERE {keys})")[0]:
            return []
    found = reader._one(
        f"SELECT count(*) FROM tunes AS b WHERE {_BLOB_KEYS} AND length(key) = 32 AND "
        "EXISTS (SELECT 1 FROM tunes AS t WHERE t.key = lower(hex(b.key)))"
    )[0]
    return [f"{found} tune key(s) held twice, as their 32 bytes and as hex text"] if found else []


def _repeated(reader: RowReader, table: str, columns: list[str], source: str) -> int:
    """How many values of `columns` (none NULL) more than one row of `table` holds, read
    from `source` (`NOT INDEXED`: its rows; `INDEXED BY` an index: in the index's order)."""
    listed = ", ".join(map(_quoted, columns))
    not_null = " AND ".join(f"{c} IS NOT NULL" for c in map(_quoted, columns))
    found = reader._one(
        f"SELECT count(*) FROM (SELECT 1 FROM {_quoted(table)} {source} WHERE {not_null} "
        f"GROUP BY {listed} HAVING count(*) > 1)"
    )
    return int(found[0]) if found and found[0] else 0


def _agree(reader: RowReader, name: str, table: str, columns: list[str]) -> bool:
    """Whether index `name` and its table's rows agree by a fingerprint of both, read by two
    aggregate scans (an `EXCEPT` both ways costs 3-6 times more on 100,000 tunes): how many,
    their rowids, and each column's lengths and first and last characters, weighted by
    rowid. Where they do not, the `EXCEPT`s name what differs; a difference these miss
    leaves a lookup by that index a row of another value, which its own checks then judge
    (a kernel row's symbol names its key: another's binary lacks it, and is not served)."""
    parts = ["count(*)", "total(rowid)"]
    for c in map(_quoted, columns):
        parts += [
            f"total(length({c}) * (rowid % 1009))",
            f"total(unicode({c}) * (rowid % 997))",
            f"total(unicode(substr({c}, -1)) * (rowid % 991))",
        ]
    fingerprint = f"SELECT {', '.join(parts)} FROM {_quoted(table)}"
    scanned = reader._one(f"{fingerprint} NOT INDEXED")
    return scanned == reader._one(f"{fingerprint} INDEXED BY {_quoted(name)}")


def require_few(reader: Bundle) -> None:
    """`BundleError` where the manifest, fingerprints or signatures hold more rows than their
    readers read (`MANIFEST_ROWS`, `FINGERPRINT_ROWS`, `SIGNATURES`): refused as those
    readers refuse them (`_few`), counted with no value read (a huge one is each reader's)."""
    from warmcli.bundle.manifest import FINGERPRINT_ROWS, MANIFEST_ROWS
    from warmcli.bundle.signed import SIGNATURES

    signed = reader._one("SELECT 1 FROM sqlite_master WHERE name = 'signatures'") is not None
    bounds = [("manifest", MANIFEST_ROWS), ("fingerprints", FINGERPRINT_ROWS)]
    for table, most in bounds + [("signatures", SIGNATURES)] * signed:
        reader._few(f"SELECT 1 FROM {table} LIMIT {most + 1}", most, table)


def require_consistent(reader: Bundle) -> None:
    """`BundleError` naming the first of `index_problems`, if any (read in one snapshot), once
    `require_few` found the manifest, fingerprints and signatures within their readers' bounds:
    a bundle `warm stats`, `verify` or `merge` refuses for their count every command refuses."""
    from warmcli.bundle.oversize import refused

    require_few(reader)
    try:
        with reader.snapshot():
            problems = index_problems(reader)
            twins = twin_keys(reader)
    except BundleError as exc:  # a value too long to read: the entry holding it is named
        raise refused(reader, exc) from None
    if twins:
        raise BundleError(f"{reader.fspath}: {INCONSISTENT}: {twins[0]} (warm verify says so too)")
    if problems:
        more = f" (+{len(problems) - 1} more)" if len(problems) > 1 else ""
        raise BundleError(
            f"{reader.fspath}: {INCONSISTENT}: {problems[0]}{more} (its indexes disagree "
            "with its rows; warm verify lists every problem)"
        )


def require_well_formed(bundle: Bundle, operation: str | None = None, tunes: bool = True) -> None:
    """Every manifest and fingerprint row (few: bounded), every kernel row (with its times)
    and, `tunes`, every tune row (`operation`'s only, if given) parsed and dropped: the
    first malformed raises the `BundleError` naming it."""
    from warmcli.bundle.rows import AS_STORED

    bundle.manifest(), bundle.fingerprints()  # (as stats reads them: `warm sign` signs them)
    for _ in bundle.each_kernel_used(order=AS_STORED):
        pass
    for _ in bundle.each_tune(operation, order=AS_STORED) if tunes else ():
        pass
