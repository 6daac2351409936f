"""What removing kernels and tunes leaves unused, removed in the remover's transaction.

`remove` runs inside `Bundle.delete`'s write transaction: the kernels and tunes it
names, then `drop_unused`: every blob no kernel
refers to, every fingerprint no entry is left from (a toolchain no kernel was built
by, a device no tune was measured on and no kernel was built for) and, when tunes
went, every interned kernel key (`tune_kernels`) no tune's candidates name any more.
The highest id always stays, named or not: a new key takes the id after it, so an id
is never reused and a reader that kept an id's key never reads another kernel under
it. Where a tune's candidates cannot be read (a corrupt entry), the ids it names are
unknown and no key is removed. The ids named are gathered in a temporary table, never in
memory, so memory stays flat whatever the number of rows. `free_blobs` removes the blobs a
writer names (a rebuilt kernel's old binary, one another writer stored alike: digests its
caller holds, one a kernel it writes) in one statement through a temporary table too. This
module owns no state beyond those tables, dropped before it returns; it opens no file and
never prints.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

from warmcli.bundle.candidates import kernel_ids
from warmcli.bundle.tune_row import BY_KEY, key_param

_DELETE_UNUSED_FINGERPRINTS = """
DELETE FROM fingerprints WHERE
    (kind = 'toolchain' AND substr(identity, 11) NOT IN (SELECT toolchain FROM kernels))
 OR (kind = 'device' AND substr(identity, 8) NOT IN (SELECT device FROM tunes)
     AND NOT EXISTS (SELECT 1 FROM kernels
         WHERE backend = json_extract(fingerprints.data, '$.backend')
           AND arch = json_extract(fingerprints.data, '$.arch')))
"""
_NAMING = "SELECT candidates FROM tunes WHERE substr(candidates, 1, 1) IN (x'02', x'03')"


def _drop_unused_kernel_ids(conn: sqlite3.Connection) -> None:
    """Remove the ids of `tune_kernels` that no tune names, but the highest (see the module
    doc): the named ids gathered in a temporary table, never in memory, so a bundle of any
    number of rows costs a clean no more memory than a few tunes."""
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS warm_named (id INTEGER PRIMARY KEY)")
    try:
        conn.execute("DELETE FROM temp.warm_named")
        insert = "INSERT OR IGNORE INTO temp.warm_named VALUES (?)"
        tunes = conn.execute(_NAMING)  # format 3's documents (a blob's tag)
        for (candidates,) in tunes:
            try:
                ids = kernel_ids(candidates)[0]
            except ValueError:
                tunes.close()  # ended before its table is dropped
                return  # a tune's ids are unknown: none is removed
            conn.executemany(insert, ((i,) for i in ids))
        conn.execute(
            "DELETE FROM tune_kernels WHERE id < (SELECT max(id) FROM tune_kernels)"
            " AND id NOT IN (SELECT id FROM temp.warm_named)"
        )
    finally:
        conn.execute("DROP TABLE IF EXISTS temp.warm_named")


_FREE = (
    "DELETE FROM blobs WHERE sha256 IN (SELECT sha256 FROM temp.warm_freed)"
    " AND sha256 NOT IN (SELECT sha256 FROM kernels)"
)


def free_blobs(conn: sqlite3.Connection, shas: Iterable[str]) -> int:
    """Inside a write transaction on `conn`: remove the blobs of `shas` that no kernel refers
    to (a rebuilt kernel's old binary, a writer's own of a row another writer kept); returns
    blobs removed. One statement for them all, the digests put in a temporary table (the
    caller's own, held in memory: at most one a kernel it writes): the kernels' digests are
    gathered once (a statement a blob gathered them again for each, blobs times kernels: a
    second writer's put of 16,016 kernels 2.5 s, now 0.8 s)."""
    named = [(sha,) for sha in shas]
    if not named:
        return 0
    conn.execute("CREATE TEMP TABLE IF NOT EXISTS warm_freed (sha256 TEXT PRIMARY KEY)")
    try:
        conn.execute("DELETE FROM temp.warm_freed")
        conn.executemany("INSERT OR IGNORE INTO temp.warm_freed VALUES (?)", named)
        return conn.execute(_FREE).rowcount
    finally:
        conn.execute("DROP TABLE IF EXISTS temp.warm_freed")


def drop_unused(conn: sqlite3.Connection, tunes_removed: bool) -> int:
    """Inside a write transaction on `conn`: remove what no entry uses any more (see the
    module doc; interned kernel keys only when `tunes_removed`); returns blobs removed."""
    blobs = conn.execute("DELETE FROM blobs WHERE sha256 NOT IN (SELECT sha256 FROM kernels)")
    removed = blobs.rowcount
    conn.execute(_DELETE_UNUSED_FINGERPRINTS)
    if tunes_removed:
        _drop_unused_kernel_ids(conn)
    return removed


# plain `?`s, the key given twice: Python 3.12.1's sqlite3 warns of numbered ones (gh-117995)
_BY_ROWID = "DELETE FROM {} WHERE rowid = ? AND (? IS NULL OR CAST(key AS BLOB) = ?)"


def remove(
    conn: sqlite3.Connection,
    secure_delete: str,
    kernel_keys: Sequence[str],
    tune_keys: Sequence[str],
    rows: tuple[Sequence[tuple[int, bytes | None]], ...],
) -> int:
    """Inside a write transaction on `conn`, SQLite's `secure_delete` set so ("ON": freed
    pages zeroed, "FAST": not): remove the kernels and tunes of these keys, and `rows`
    (kernels', tunes' (rowid, key's bytes), each if its key is still those bytes), then
    what no entry uses any more (`drop_unused`); returns blobs removed."""
    conn.execute(f"PRAGMA secure_delete = {secure_delete}")
    conn.executemany("DELETE FROM kernels WHERE key = ?", [(k,) for k in kernel_keys])
    tunes = conn.executemany(f"DELETE FROM tunes WHERE {BY_KEY}", map(key_param, tune_keys))
    for table, ids in zip(("kernels", "tunes"), rows, strict=True):
        conn.executemany(_BY_ROWID.format(table), [(i, key, key) for i, key in ids])
    return drop_unused(conn, tunes.rowcount > 0 or bool(rows[1]))
