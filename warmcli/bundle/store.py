"""A bundle warm's commands and writers open: `Bundle`, a `BundleCore` that writes and keeps.

`BundleCore` (`warmcli.bundle.core`) is what a production process serves from: its reads, which
rows trusted keys cover, opening and closing. `Bundle` adds what only a writer or a command does:
`create` (a new file, made beside and published whole, under the file lock), `create_new` (a
merge's temporary file, made here, never through a link, and kept to), `transaction` (one
write under that lock, into the file the path names then: `_follow_replacement`), `put` (kernels
with their blobs, tunes and fingerprints, in one transaction) and `touch` (last-used times moved
on), and inherits maintenance, aggregates and signing from `warmcli.bundle.admin.BundleAdmin`. A
production process opens one only to write back (`warmcli.bundle.served`: a bundle it makes, or
the writer at exit), so one that only serves imports neither this module nor `admin`. A `Bundle`
owns what a `BundleCore` owns (one SQLite connection, the rows it wrote); it never prints.
"""

from __future__ import annotations

import _sqlite3 as sqlite3  # as `warmcli.bundle.file`
import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Self

from warmcli.bundle.admin import BundleAdmin
from warmcli.bundle.blobs import Streamed
from warmcli.bundle.core import BundleCore
from warmcli.bundle.file import _open_connection, _retrying, _sqlite_errors
from warmcli.bundle.kernel_row import TOUCH, write_kernel_row
from warmcli.bundle.tune_row import interner, tune_values, write_tune_row
from warmcli.errors import REMOVED, BundleError
from warmcli.home import make_folder
from warmcli.records import KernelRecord, TuneRecord

__all__ = ["Bundle", "BundleError"]


class Bundle(BundleAdmin, BundleCore):
    """An open bundle file that writes and keeps; see the module doc."""

    _pinned = False  # `create_new`'s: kept to the file it made, or written to none

    @classmethod
    def create(cls, path: str | os.PathLike[str]) -> Self:
        """Create a new bundle file (or open it if another process just did)."""
        from pathlib import Path  # a writer's, as its lock: a serving process imports neither

        from warmcli.bundle.file import _write_empty
        from warmcli.bundle.journal import publish, remove_leftovers, temp_beside, unlink_all
        from warmcli.bundle.lock import write_lock

        path = Path(path)
        make_folder(path.parent)
        with write_lock(path):
            if path.exists() and path.stat().st_size > 0:
                return cls.open(path, write=True)
            remove_leftovers(path)
            real = Path(os.path.realpath(path))  # a link's file is made, the link kept
            tmp = temp_beside(real)
            try:
                tmp.unlink(missing_ok=True)
                with _sqlite_errors(path):
                    _write_empty(tmp)  # made here, never through a link: else refused
                publish(tmp, real)  # a crash before this leaves no bundle, never half of one
            except BaseException:
                unlink_all(tmp, Path(f"{tmp}-journal"))
                raise
        bundle = cls.open(path, write=True)
        bundle.written.update(("manifest", k) for k in bundle.manifest())
        return bundle

    @classmethod
    def create_new(cls, tmp: str | os.PathLike[str]) -> Self:
        """A new bundle at `tmp`, a temporary file's name beside another (a merge's, published
        by its caller): made here (`_write_empty`: never through a link nor over a file there,
        else a `BundleError`), opened only once seen to be that file (`still_made`), and kept
        to it: a write after something else took its name is refused, never made into the
        file that name leads to then (`_follow_replacement`)."""
        from pathlib import Path  # a writer's, as in `create`

        from warmcli.bundle.file import _write_empty
        from warmcli.bundle.temp_file import TEMP_REPLACED, still_made

        tmp = Path(tmp)
        with _sqlite_errors(tmp):
            made = _write_empty(tmp)
        bundle = cls.open(tmp, write=True)
        try:
            if bundle._ident != (made.st_dev, made.st_ino):
                raise BundleError(f"{tmp}: {TEMP_REPLACED}")
            still_made(tmp, made)  # the file SQLite opened, not one a link led to meanwhile
        except BaseException:
            bundle.close()
            raise
        bundle._pinned = True
        bundle.written.update(("manifest", k) for k in bundle.manifest())
        return bundle

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, under the bundle's file lock (other writers wait); the write
        `joining` names (if any) is in it too, once."""
        if not self.writable:
            raise BundleError(f"{self.path}: bundle is open read-only")
        from warmcli.bundle.file import rolled_back, settle_journal  # a writer's:
        from warmcli.bundle.journal import remove_leftovers
        from warmcli.bundle.lock import write_lock  # a serving process never locks nor sweeps

        if self._pinned:  # before the lock: none made where a link leads
            self._follow_replacement()
        with write_lock(self.path), self._lock, _sqlite_errors(self.path):
            self._follow_replacement()
            if not self._swept:
                remove_leftovers(self.path)
                self._swept = True
            conn, joining, self.joining = self._conn, self.joining, None  # once, even if it fails
            settle_journal(self.path)  # not SQLite inside the transaction: checked after
            _retrying(self.path, lambda: conn.execute("BEGIN IMMEDIATE"))
            try:
                yield conn
                joining(conn) if joining is not None else None
                conn.execute(
                    "INSERT OR REPLACE INTO manifest VALUES ('updated', ?)", (repr(time.time()),)
                )
                _retrying(self.path, lambda: conn.execute("COMMIT"))
            except BaseException:
                rolled_back(conn)  # (with the journal a write the disk refused left)
                raise

    def put(
        self,
        kernels: Iterable[tuple[KernelRecord, bytes | Streamed]] = (),
        tunes: Iterable[TuneRecord] = (),
        fingerprints: Iterable[tuple[str, str, dict[str, object]]] = (),
        held: set[str] | None = None,
        now: float | None = None,
    ) -> tuple[int, int]:
        """Store kernels (with binaries), tunes and fingerprints in one transaction, used `now`
        (default: now): how many of each it stored (others' alike kept: `held`, `write_*_row`)."""
        now, n_kernels, n_tunes = time.time() if now is None else now, 0, 0
        with self.transaction() as conn:
            for identity, kind, data in fingerprints:
                from warmcli.bundle.manifest import put_fingerprint  # (never a serving process)

                put_fingerprint(conn, identity, kind, json.dumps(data, sort_keys=True))
                self.written.add(("fingerprints", identity))
            replaced: set[str] = set()  # blobs of rebuilt kernels: freed when none uses them
            stored: dict[str, object] = {}  # blobs written here (a group's, by each kernel)
            for record, binary in kernels:
                old = conn.execute("SELECT sha256 FROM kernels WHERE key = ?", (record.key,))
                replaced.update(str(r[0]) for r in old.fetchall() if r[0] != record.sha256)
                if isinstance(binary, Streamed):  # another bundle's, copied a chunk at a time
                    binary.store(conn)
                elif stored.get(record.sha256) != binary:  # (a group's kernels: its bytes once)
                    stored[record.sha256] = binary
                    conn.execute(
                        "INSERT OR REPLACE INTO blobs VALUES (?, ?, ?)",  # mends a corrupt one
                        (record.sha256, len(binary), memoryview(binary)),
                    )
                self.written.update((("blobs", record.sha256), ("kernels", record.key)))
                if write_kernel_row(conn, record, now, None if self.own_builds else self._opened):
                    n_kernels += 1
                elif held is not None:  # another writer's row kept: ours goes if none uses it
                    held.add(record.key), replaced.add(record.sha256)
            from warmcli.bundle.unused import free_blobs  # (a writer's: never a serving one's)

            free_blobs(conn, replaced)
            intern = interner(conn, self.path)
            for tune in self.unsigned_rows(tunes) if self.keeps_signed else tunes:
                self.written.add(("tunes", tune.key))
                n_tunes += write_tune_row(conn, tune_values(tune, intern, now), self._opened)
        return n_kernels, n_tunes

    def touch(self, last_used: Mapping[str, float]) -> int:
        """Move kernels' `last_used` on (a writing process's loads), never back (`TOUCH`)."""
        rows = [(when, key) for key, when in last_used.items()]  # none: no transaction
        with self.transaction() if rows else nullcontext(None) as conn:
            return 0 if conn is None else conn.executemany(TOUCH, rows).rowcount

    def _follow_replacement(self) -> None:
        """Under the write lock: when the path names another file than the one open (a merge
        published over it, holding this lock), write to that one, never to a file unseen."""
        try:
            st = os.lstat(self.path) if self._pinned else os.stat(self.path)
        except FileNotFoundError:
            raise BundleError(f"{self.path}: {REMOVED}") from None
        if (st.st_dev, st.st_ino) == self._ident:
            return
        if self._pinned:
            from warmcli.bundle.temp_file import TEMP_REPLACED

            raise BundleError(f"{self.path}: {TEMP_REPLACED}")
        conn, self._ident = _open_connection(self.path, write=True)
        self._conn.close()
        self._conn = conn
        self._forget_kernel_keys()
