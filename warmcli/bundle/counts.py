"""Counts a listing reads per row, kept out of memory: `HeldCounts`.

`warm stats` gives each kernel its part of what it shares with other rows: of a binary
several kernels use (`BundleAdmin.blob_users`), of a compile that made several rows of one
kernel (`warmcli.bundle.compiles`). Held in a dict, those counts grew with the bundle
(150,000 kernels kept with their PTX twins: `warm stats --json` from 31 to 117 MB; README:
every reading command's memory stays flat). A `HeldCounts` keeps them in a private temporary
SQLite file (`connect("")`: SQLite removes it as it closes), each under the sha256 of its
key, made on first use, written `BATCH` at a time and read as many at a time (`get_many`: a
listing of 24,000 rows made 72,000 queries of one row each). Where that file cannot be made,
written or read (a full TMPDIR, a file size limit), that is a `BundleError` in one line, as a
bundle's own sort refused its temporary file is (`of`: the bundle's path, which it starts
with): a count not kept, read as one, gave each kernel of a batch its whole binary. It owns
only that file and never prints.
"""

from __future__ import annotations

import _sqlite3 as sqlite3  # as `warmcli.bundle.file`
import hashlib
from collections.abc import Iterable, Sequence
from itertools import islice

from warmcli.bundle.disk_full import disk_full
from warmcli.config import sqlite_temp_dir
from warmcli.errors import WRITE_FAILED, BundleError
from warmcli.printable import printable

Key = tuple[object, ...]  # texts and numbers (a number by its repr: exact for a float)
BATCH = 256  # counts written, and read, in one query (within SQLite's 999 parameters)


def _digest(key: Key) -> bytes:
    text = "\0".join(v if isinstance(v, str) else repr(v) for v in key)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


class HeldCounts:
    """Counts by key, in a temporary file (see the module doc): `get` as a dict's."""

    def __init__(self, counts: Iterable[tuple[Key, int]] = (), of: str = "") -> None:
        self._conn: sqlite3.Connection | None = None
        self._of = of
        given = iter(counts)
        while batch := list(islice(given, BATCH)):  # (read outside the `try`: a bundle's)
            self._put([(_digest(key), n) for key, n in batch])

    def put(self, key: Key, n: int) -> None:
        self._put([(_digest(key), n)])

    def _put(self, rows: list[tuple[bytes, int]]) -> None:
        try:
            if self._conn is None:
                self._conn = sqlite3.connect("")
                self._conn.execute("CREATE TABLE counts (id BLOB PRIMARY KEY, n INTEGER)")
            self._conn.executemany("INSERT OR REPLACE INTO counts VALUES (?, ?)", rows)
        except sqlite3.Error as exc:
            raise self._refused(exc) from None

    def get(self, key: Key, default: int = 1) -> int:
        return self.get_many([key], default)[0]

    def get_many(self, keys: Sequence[Key], default: int = 1) -> list[int]:
        """Each of `keys`' count (`default` where none is held), `BATCH` keys a query."""
        if self._conn is None:
            return [default] * len(keys)
        ids, found = [_digest(key) for key in keys], dict[bytes, int]()
        try:
            for start in range(0, len(ids), BATCH):
                chunk = ids[start : start + BATCH]
                sql = f"SELECT id, n FROM counts WHERE id IN ({', '.join('?' * len(chunk))})"
                found.update(self._conn.execute(sql, chunk).fetchall())
        except sqlite3.Error as exc:
            raise self._refused(exc) from None
        return [int(found.get(i, default)) for i in ids]

    def _refused(self, exc: sqlite3.Error) -> BundleError:
        """The one-line error of a failure of the temporary file (the counts are then not
        known: none is guessed)."""
        code = getattr(exc, "sqlite_errorcode", 0) or (13 if "disk is full" in str(exc) else 0)
        why = (
            disk_full(self._of or ".", sqlite_temp_dir)
            if code == sqlite3.SQLITE_FULL
            else WRITE_FAILED
            if code & 0xFF == sqlite3.SQLITE_IOERR
            else f"a temporary file SQLite could not use ({printable(exc)})"
        )
        said = f"{why} (the temporary file warm counts shared binaries and compiles in)"
        return BundleError(f"{self._of}: {said}" if self._of else said)
