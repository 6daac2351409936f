"""An open bundle as a production process serves it: `BundleCore` (open, close), the reads the
runtime makes of its rows and blobs, and which rows it serves under trusted keys.

The file itself (schema, header, opening, validation, locking) is `warmcli.bundle.file`; reading and
parsing a row is `warmcli.bundle.rows`; the signed rows are `warmcli.bundle.signed` (inherited).
What only a writer or a command does (`create`, `transaction`, `put`, `touch`; maintenance,
aggregates and signing, `warmcli.bundle.admin`) is `warmcli.bundle.store.Bundle`'s, a subclass:
`open(write=True)` is its (`create` is), and a process that only serves imports neither module (a
first miss's `foreign` reads `warmcli.bundle.grouped` on use). Opened with trusted keys, a kernel or
tune row no trusted signature covers is not served (`covered`, `refused`; see
`warmcli.bundle.signing`). A bundle is untrusted input: it is read with plain SQL, never unpickled
or evaluated (and its binaries are native code); every field of every row is checked before it
becomes a record, a blob whose size or sha256 does not match is never served, and every SQLite
failure becomes a one-line `BundleError`. Kernels, tunes and blobs are read on demand, listings
stream (`each_kernel`, `each_tune`), a batch of rows at a time, and `snapshot` reads several things
in one read transaction. A bundle owns its one SQLite connection (shared by every thread,
serialised by its lock; a forked child opens its own, of the file the path names then), the set of
rows it wrote, a write to join its next (`joining`), if signed tune rows (`keeps_signed`) or other
writers' builds (`own_builds`) stay, its trusted keys and what they cover (`bundle.signed`). It
never writes and never prints."""

from __future__ import annotations

import _sqlite3 as sqlite3  # as `warmcli.bundle.file`
import hashlib
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, Self

from warmcli.bundle.blobs import MAX_LOADED_BYTES, over_cap
from warmcli.bundle.file import PAGE_BYTES, _open_connection, _retrying, _sqlite_errors
from warmcli.bundle.kernel_row import (
    _PREFETCH_SELECT,
    _ROWID_FROM,
    PREFETCH_VALUE_BYTES,
    _kernel_record,
    chunk,
)
from warmcli.bundle.rows import _PROCESS, KERNEL_SELECT, KERNEL_WIDTH, OnError, _corrupt, _Malformed
from warmcli.bundle.signed import SignedRows
from warmcli.bundle.tune_row import (
    BY_KEY,
    TUNE_ORDER,
    TUNE_SELECT,
    _tune_record,
    key_param,
    parsed_tunes,
    signed_values,
)
from warmcli.errors import BundleError
from warmcli.forking import new_rlock
from warmcli.home import path_str
from warmcli.records import HeldElsewhere, KernelRecord, TuneRecord

if TYPE_CHECKING:
    from warmcli.bundle.signing import RowSet

PREFETCH_CHARS = 64 << 20  # all prefetched rows' values together (each: PREFETCH_VALUE_BYTES)


class BundleCore(SignedRows):
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
    ) -> Self:
        """Open an existing bundle (read-only unless `write`); `create` makes a new one. With
        `trusted_keys` (raw Ed25519 public keys), a bundle holding entries no trusted key
        signed is refused (an older format before it migrates), but by a writer that `signs`
        (none of it is served: each entry it reaches is written and signed again), and only
        rows they signed are served."""
        assert not write or hasattr(cls, "create"), "a writer is `warmcli.bundle.store.Bundle`"
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
            from warmcli.bundle.location import unread_scheme  # (only when none is there)

            raise BundleError(f"{path}: no such bundle{unread_scheme(path)}") from None
        return cls(path, conn, write, ident)._trusting(trusted_keys, judged, write and signs)

    def _trusting(
        self, trusted_keys: Sequence[bytes] | None, judged: RowSet | None, signs: bool = False
    ) -> Self:
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

    def close(self) -> None:
        self._close_connection()

    def __enter__(self) -> Self:
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
            "CASE WHEN typeof(data) = 'blob' AND length(data) <= ? THEN data END "
            "FROM blobs WHERE sha256 = ?",  # (a text of bytes, never decoded: named text)
            (MAX_LOADED_BYTES, sha256),
            MAX_LOADED_BYTES + PAGE_BYTES,  # a blob held in its row's page is loaded to be measured
        )
        if row is None or row[2] != "blob":
            kind = "missing" if row is None or row[2] == "null" else f"{row[2]}, not binary"
            raise BundleError(f"{self.path}: blob {short} is {kind}")
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

    def foreign(
        self, backend: str, arch: str, toolchains: Iterable[str], device: str
    ) -> list[HeldElsewhere]:
        """`warmcli.bundle.grouped.held_elsewhere`'s: a first miss's, imported then."""
        from warmcli.bundle.grouped import held_elsewhere

        return held_elsewhere(self, backend, arch, toolchains, device)
