"""An open bundle: `Bundle` (open, create, close, transactions), the reads and writes the runtime
makes of its rows and blobs, and which rows it serves under trusted keys.

The file itself (schema, header, opening, validation, locking) is `warmcli.bundle.file`; reading and
parsing a row is `warmcli.bundle.rows`; maintenance, aggregates and the signed rows are
`warmcli.bundle.admin` (a mixin `Bundle` inherits, so every `Bundle.x` name stays). Opened with
trusted keys, a kernel or tune row no trusted signature covers is not served (`covered`, `refused`;
see `warmcli.bundle.signing`). A bundle is untrusted input: it is read with plain SQL, never
unpickled or evaluated (and its binaries are native code); every field of every row is checked
before it becomes a record, a blob whose size or sha256 does not match is never served, and every
SQLite failure becomes a one-line `BundleError`. Kernels, tunes and blobs are read on demand,
listings stream (`each_kernel`, `each_tune`), a batch of rows at a time, and `snapshot` reads
several things in one read transaction. Writers take the file lock and write each batch in one
transaction; a writer whose file was replaced meanwhile (a merge published over it, holding that
lock) writes to the new one, and a writer's first write removes what dead writers left beside the
file (`create`: any journal too). A `Bundle` owns its one SQLite connection (shared by every thread,
serialised by its lock; a forked child opens its own, of the file the path names then), the set of
rows it wrote, a write to join its next (`joining`), if signed tune rows (`keeps_signed`) or other
writers' builds (`own_builds`) stay, its trusted keys and what they cover (`bundle.signed`)."""

from __future__ import annotations

import _sqlite3 as sqlite3  # as `warmcli.bundle.file`
import hashlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any

from warmcli.bundle.admin import BundleAdmin
from warmcli.bundle.blobs import MAX_LOADED_BYTES, Streamed, over_cap
from warmcli.bundle.file import PAGE_BYTES, _open_connection, _retrying, _sqlite_errors
from warmcli.bundle.kernel_row import (
    _PREFETCH_SELECT,
    _ROWID_FROM,
    PREFETCH_VALUE_BYTES,
    TOUCH,
    _kernel_record,
    chunk,
    write_kernel_row,
)
from warmcli.bundle.rows import _PROCESS, KERNEL_SELECT, KERNEL_WIDTH, OnError, _corrupt, _Malformed
from warmcli.bundle.tune_row import (
    BY_KEY,
    TUNE_ORDER,
    TUNE_SELECT,
    _tune_record,
    interner,
    key_param,
    parsed_tunes,
    signed_values,
    tune_values,
    write_tune_row,
)
from warmcli.errors import REMOVED, BundleError
from warmcli.forking import new_rlock
from warmcli.home import make_folder, path_str
from warmcli.records import KernelRecord, TuneRecord

if TYPE_CHECKING:
    from warmcli.bundle.signing import RowSet

PREFETCH_CHARS = 64 << 20  # all prefetched rows' values together (each: PREFETCH_VALUE_BYTES)


class Bundle(BundleAdmin):
    """An open bundle file; see the module doc."""

    def __init__(
        self, path: str, conn: sqlite3.Connection, writable: bool, ident: tuple[int, int]
    ) -> None:
        self.fspath = path_str(path)  # what reads name (pathlib is imported only for `path`)
        self._conn = conn
        self.writable = writable
        self._ident = ident  # the (device, inode) of the file `_conn` opened
        self._swept = False  # leftovers of dead writers removed (at the first write)
        self._opened = time.time()  # a tune stored alike since by another writer is kept
        self._lock = new_rlock(self, held=True)
        self.covered: RowSet | None = None  # under trusted keys: the row hashes served
        self._refused: set[str] = set()  # keys of rows held but not covered
        self.written: set[tuple[str, str]] = set()  # (table, key) this object wrote
        self._prefetched = 0  # characters of the kernel rows `kernel_rows` handed out
        self._resume: dict[tuple[str, str, int], int] = {}  # (backend, arch, start): its rowid
        self.joining: Callable[[sqlite3.Connection], None] | None = None  # the next write's too
        self.keeps_signed = False  # a production write-back: a signed tune row is kept
        self.own_builds = False  # `warm run --key`: a row another writer built is replaced

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        write: bool = False,
        trusted_keys: Sequence[bytes] | None = None,
        signs: bool = False,  # the writer signs it before it closes (`warm run --key`)
    ) -> Bundle:
        """Open an existing bundle (read-only unless `write`); `create` makes a new one. With
        `trusted_keys` (raw Ed25519 public keys), a bundle holding entries no trusted key
        signed is refused (an older format before it migrates), but by a writer that `signs`
        (none of it is served: each entry it reaches is written and signed again), and only
        rows they signed are served."""
        path, judged = path_str(path), None  # `str(Path(path))`, without importing pathlib
        if write and trusted_keys is not None:  # the signing layer sits above this module
            from warmcli.bundle.signing import judged_before_migration

            judged = judged_before_migration(cls, path, trusted_keys, signs)
        if write and os.path.isfile(path) and os.stat(path).st_size == 0:  # as `mktemp` makes it
            return cls.create(path)._trusting(trusted_keys, None)
        try:
            conn, ident = _open_connection(path, write)
        except FileNotFoundError:
            if write:
                return cls.create(path)._trusting(trusted_keys, None)
            raise BundleError(f"{path}: no such bundle") from None
        return cls(path, conn, write, ident)._trusting(trusted_keys, judged, write and signs)

    def _trusting(
        self, trusted_keys: Sequence[bytes] | None, judged: RowSet | None, signs: bool = False
    ) -> Bundle:
        if trusted_keys is None:
            return self
        from warmcli.bundle.signing import covered  # the signing layer sits above this module

        try:
            self._trusted = trusted_keys
            self.covered = judged if judged is not None else covered(self, trusted_keys, signs)
        except BaseException:
            self.close()
            raise
        return self

    @classmethod
    def create(cls, path: str | os.PathLike[str]) -> Bundle:
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
                    _write_empty(tmp)
                publish(tmp, real)  # a crash before this leaves no bundle, never half of one
            except BaseException:
                unlink_all(tmp, Path(f"{tmp}-journal"))
                raise
        bundle = cls.open(path, write=True)
        bundle.written.update(("manifest", k) for k in bundle.manifest())
        return bundle

    def close(self) -> None:
        self._close_connection()

    def __enter__(self) -> Bundle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------

    def kernel(
        self, key: str, fetched: Mapping[str, tuple[Any, ...]] | None = None, keyed: bool = False
    ) -> KernelRecord | None:
        """The kernel under `key` (None if absent, or not covered under trusted keys); its row is
        taken from `fetched` (`kernel_rows`) when there (not once a forked child found another
        file at the path: `_moved`), else read; checked (`keyed`: the caller's kernel's key)."""
        if fetched is not None and self._pid != _PROCESS[0]:  # a forked child's first read
            self._moved()  # (its own connection opened, under the lock: no frame here else)
        row = fetched.get(key) if fetched is not None and not self._other else None
        if row is None:
            row = self._one(f"{KERNEL_SELECT} WHERE key = ?", (key,))
        if row is None or (
            self.covered is not None and not self._serves("kernels", key, row[:KERNEL_WIDTH])
        ):
            return None
        try:  # named as `_parse` names it, in this frame: a hot start parses thousands
            return _kernel_record(row, keyed)
        except _Malformed as exc:
            raise BundleError(f"{self.fspath}: {_corrupt('kernel', row[0], exc)}") from None

    def kernel_rows(
        self, backend: str, arch: str, start: int = 0, count: int = -1
    ) -> dict[str, tuple[Any, ...]]:
        """Kernel rows built for `backend` and `arch` (`KERNEL_COLUMNS`, the blob's size, the
        rowid), unchecked, in stored order (`count` of them from the `start`th; -1: all),
        streamed: what a device may serve, for `kernel(key, fetched)` to check and parse one
        at a time. Bounded whatever the bundle holds: no value longer than
        `PREFETCH_VALUE_BYTES` is loaded (SQLite refuses it), at most `PREFETCH_CHARS` in all
        per open bundle, none from a row SQLite cannot hand back (a value too long, a compile
        log of many warnings, or text no UTF-8: left out, the chunk going on after it); a row
        left out is read by its key when asked for (a miss if bad). A chunk from where the
        last one ended starts after its rowid (not scanning the rows before)."""
        with self._lock:  # one statement either way (prepared once): from a rowid, or skipping
            first = self._resume.get((backend, arch, start))
        first, skip = (-(2**63), start) if first is None else (first, 0)  # from a rowid, skipping
        with self._reading(PREFETCH_VALUE_BYTES):  # no longer value loaded
            got, self._prefetched = chunk(
                lambda at, n, k: _retrying(  # (its first row is stepped here)
                    self.fspath,
                    lambda: self._conn.execute(_PREFETCH_SELECT, (backend, arch, at, n, k)),
                ),
                lambda at: self._row_from(backend, arch, at),
                (first, skip, count),
                self._prefetched,
                PREFETCH_CHARS,
            )
            if len(got) == count and got[-1][-1] < 2**63 - 1:  # the next chunk starts after it
                self._resume[(backend, arch, start + count)] = got[-1][-1] + 1
            return {r[0]: r for r in got if type(r[0]) is str}  # (a key no text: by key)

    def _row_from(self, backend: str, arch: str, rowid: int) -> tuple[Any, ...] | None:
        """The first of a device's kernel rows at or after `rowid` (passed over by `chunk`),
        read under any read's limit (another device's long name is passed as it is); None
        where it cannot be read (the chunk ends: the rest read by key)."""
        try:
            return self._one(_ROWID_FROM, (backend, arch, rowid))
        except BundleError:
            return None

    def kernels(
        self, entry: str | None = None, on_error: OnError | None = None
    ) -> list[KernelRecord]:
        """Every kernel (or those of one entry name), by device, arch and label."""
        return list(self.each_kernel(entry, on_error))

    def each_kernel(
        self, entry: str | None = None, on_error: OnError | None = None, *, order: str = ""
    ) -> Iterator[KernelRecord]:
        """`kernels`, streamed: one record at a time, never the whole table in memory
        (`order`: `BY_KEY`, `AS_STORED` (fastest), else by device, arch and label). A malformed
        row raises `BundleError`, or with `on_error` is handed to it (its key, the problem)."""
        from warmcli.bundle.oversize import each_named  # a listing's: never a serving one's

        rows = self._rows(KERNEL_SELECT, order or "device, arch, label", "entry", entry)
        return each_named(self, "kernel", _kernel_record, rows, on_error)

    def blob(self, sha256: str) -> bytes:
        """A binary to load, by its sha256; raises `BundleError` if it is missing, does not
        match or is over `MAX_LOADED_BYTES` (`warmcli.bundle.blobs`: blobs read in chunks)."""
        short = str(sha256)[:16]
        row = self._one(  # one query; a blob over the cap is never read into memory
            "SELECT size, length(data), typeof(data), "
            "CASE WHEN length(data) <= ? THEN data END FROM blobs WHERE sha256 = ?",
            (MAX_LOADED_BYTES, sha256),
            MAX_LOADED_BYTES + PAGE_BYTES,  # a blob held in its row's page is loaded to be measured
        )
        if row is None or row[2] != "blob":
            raise BundleError(f"{self.path}: blob {short} is missing")
        size, length, _, data = row
        if length > MAX_LOADED_BYTES:
            raise over_cap(self.path, short, length, MAX_LOADED_BYTES)
        if not isinstance(data, bytes) or hashlib.sha256(data).hexdigest() != sha256:
            raise BundleError(f"{self.path}: blob {short} does not match its sha256")
        if size != length:
            raise BundleError(f"{self.path}: blob {short} is {length} bytes, its entry says {size}")
        return data

    def tune(self, key: str, samples: bool = True) -> TuneRecord | None:
        """The tune under `key` (None: absent, or not covered under trusted keys; `samples`:
        `_tune_record`'s), its row and kernel keys read in one snapshot (or this transaction)."""
        with self._lock, _sqlite_errors(self.fspath):  # closed (`use_bundle`): BundleError
            inside = self._conn.in_transaction
        with self._lock, nullcontext() if inside else self.snapshot():
            row = self._one(f"{TUNE_SELECT} WHERE {BY_KEY}", key_param(key))
            if row is None:
                return None
            signed = self.covered is not None  # its hash names its kernels, not their ids
            if signed and not self._serves("tunes", key, signed_values(row, self._kernel_key)):
                return None
            return self._parse("tune", row[0], lambda: _tune_record(row, self._kernel_key, samples))

    def tunes(
        self, operation: str | None = None, on_error: OnError | None = None
    ) -> list[TuneRecord]:
        """Every tune (or those of one operation), by operation and shape."""
        return list(self.each_tune(operation, on_error))

    def each_tune(
        self,
        operation: str | None = None,
        on_error: OnError | None = None,
        limit: int = -1,
        *,
        order: str = "",
        samples: bool = True,
    ) -> Iterator[TuneRecord]:
        """`tunes`, streamed as `each_kernel` (at most `limit` rows unless negative; `order`:
        by operation and shape unless given; `samples`: as `tune`'s)."""
        rows = self._rows(TUNE_SELECT, order or TUNE_ORDER, "operation", operation, limit)
        return parsed_tunes(self, rows, on_error, samples)

    # -- writing ---------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, under the bundle's file lock (other writers wait); the write
        `joining` names (if any) is in it too, once."""
        if not self.writable:
            raise BundleError(f"{self.path}: bundle is open read-only")
        from warmcli.bundle.file import rolled_back, settle_journal  # a writer's:
        from warmcli.bundle.journal import remove_leftovers
        from warmcli.bundle.lock import write_lock  # a serving process never locks nor sweeps

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
            st = os.stat(self.path)
        except FileNotFoundError:
            raise BundleError(f"{self.path}: {REMOVED}") from None
        if (st.st_dev, st.st_ino) == self._ident:
            return
        conn, self._ident = _open_connection(self.path, write=True)
        self._conn.close()
        self._conn = conn
        self._forget_kernel_keys()
