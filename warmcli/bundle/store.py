"""The environment bundle: one SQLite file holding every compiled kernel and every tune pick.

Schema (versioned by `PRAGMA user_version`, marked as warm's by `PRAGMA
application_id`): `manifest` (format and warm versions, created/updated times),
`fingerprints` (every toolchain and device that wrote entries), `blobs` (binaries
by sha256: kernels compiled in one batch share one), `kernels` (key, device,
arch, entry, symbol, blob sha256, compile log, seconds), `tunes` (tune key,
pick, every candidate's measurement) and `signatures` (Ed25519 signatures of the
rows their signers vouch for, see `warmcli.bundle.signing`; a bundle made before it
existed has no such table and opens as unsigned). Opened with trusted keys, a
kernel or tune row no trusted signature covers is not served. A bundle is
untrusted input: it is read with plain SQL, never unpickled or evaluated (and its
binaries are native code: see `warmcli.bundle.signing`); its schema must be exactly warm's
(`sqlite_master` compared row by row, so no trigger, view, extra index or
generated column of a bundle ever runs), with `trusted_schema` off; every field
of every row is checked (type, size, format; a measured tune's pick is one of its
candidates that ran) before it becomes a record, a blob whose size or sha256 does
not match is never served, and every SQLite failure becomes a one-line
`BundleError` (a full disk is named so: the write was rolled back). Sizes are read
before values: a text over its limit is refused by its `length()` in SQL (and SQLite
itself refuses to load any value over `MAX_VALUE_BYTES`, a blob's limit for blobs),
so no row costs more memory than its limits. Opening checks the schema; kernels,
tunes and blobs are read on demand, listings stream (`each_kernel`, `each_tune`), a
batch of rows at a time, and `snapshot` reads several things in one read
transaction. Writers take a file lock (`write_lock`) and write each batch in one
transaction; a writer whose file was replaced meanwhile (a merge published over it,
holding that lock) writes to the new one, and a writer's first write removes what
dead writers left beside the file. The file stays in rollback-journal mode (a file
switched to WAL is switched back on open, or refused where it cannot be written), so
a read-only copy opens, and a write interrupted by a crash is rolled back by the next
open. "Database is locked" is waited out by the busy timeout and then retried, never
shown.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from warmcli._version import __version__
from warmcli.bundle.file import (
    SCHEMA_SELECT,
    remove_leftovers,
    schema_problems,
    unlink_all,
    warm_schema,
)
from warmcli.errors import WarmError
from warmcli.records import KernelRecord, TuneRecord, tune_key

if TYPE_CHECKING:
    from warmcli.bundle.signing import RowSet, StoredSignature

FORMAT_VERSION = 1
APPLICATION_ID = 0x5741524D  # "WARM"
SQLITE_MAGIC = b"SQLite format 3\x00"
SQLITE_HEADER_BYTES = 100
WAL_FORMAT = 2  # the header's file format bytes in write-ahead-log mode (1: rollback journal)
BUSY_TIMEOUT_MS = 60_000
LOCK_RETRIES = 6  # after the busy timeout, with backoff: a "database is locked" never surfaces
DISK_FULL = "the disk is full"
MAX_BLOB_BYTES = 256 << 20  # a binary larger than this is not a kernel
MAX_NAME_CHARS = 4096  # keys, devices, arches, entries, symbols, toolchains, operations
MAX_TEXT_CHARS = 4 << 20  # labels, compile logs, shape keys, JSON documents

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
CREATE TABLE tunes (
    key TEXT PRIMARY KEY, operation TEXT NOT NULL, shape_key TEXT NOT NULL,
    device TEXT NOT NULL, checksum TEXT NOT NULL, status TEXT NOT NULL, pick TEXT,
    candidates TEXT NOT NULL, seconds REAL NOT NULL, measured_at REAL NOT NULL,
    updated REAL NOT NULL);
CREATE INDEX tunes_operation ON tunes(operation);
"""
BASE_SCHEMA = SCHEMA  # what a bundle made before signatures existed holds
SIGNATURES_SCHEMA = """
CREATE TABLE signatures (
    key_id TEXT PRIMARY KEY, public_key BLOB NOT NULL, signature BLOB NOT NULL,
    rows BLOB NOT NULL, signed_at REAL NOT NULL);
"""
SCHEMA = BASE_SCHEMA + SIGNATURES_SCHEMA  # part of warm's schema; optional in an older bundle
KERNEL_COLUMNS = (
    "key, device, backend, arch, entry, label, symbol, sha256, toolchain, components, "
    "compile_log, seconds"
)
MAX_VALUE_BYTES = 4 * MAX_TEXT_CHARS + 64  # SQLite refuses to read a longer text (UTF-8)
READ_BATCH = 256  # rows fetched at a time while a listing streams
PREFETCH_ROW_CHARS = 64 << 10  # a kernel row prefetched for serving has texts this short
PREFETCH_CHARS = 64 << 20  # and all prefetched rows together no more than this
BY_KEY, AS_STORED = "key", "rowid"  # orders of a listing (`Bundle.each_kernel`, `each_tune`)


def _bounded_select(columns: tuple[tuple[str, int | None], ...], table: str) -> str:
    """SELECT of `columns`, each text read only when `length()` says it is within its limit
    (else NULL), then one more column naming the first that is over it (NULL when none):
    an oversized value is refused by its length, never read into Python."""
    values = ", ".join(
        c if limit is None else f"CASE WHEN length({c}) <= {limit} THEN {c} END"
        for c, limit in columns
    )
    over = " ".join(
        f"WHEN length({c}) > {limit} THEN '{c} ' || length({c})"
        for c, limit in columns
        if limit is not None
    )
    return f"SELECT {values}, CASE {over} END FROM {table}"


KERNEL_SELECT = _bounded_select(
    (
        *((c, MAX_NAME_CHARS) for c in ("key", "device", "backend", "arch", "entry")),
        ("label", MAX_TEXT_CHARS),
        *((c, MAX_NAME_CHARS) for c in ("symbol", "sha256", "toolchain")),
        ("components", MAX_TEXT_CHARS),
        ("compile_log", MAX_TEXT_CHARS),
        ("seconds", None),
        ("(SELECT size FROM blobs WHERE sha256 = kernels.sha256)", None),
    ),
    "kernels",
)
TUNE_SELECT = _bounded_select(
    (
        *((c, MAX_NAME_CHARS) for c in ("key", "operation")),
        ("shape_key", MAX_TEXT_CHARS),
        *((c, MAX_NAME_CHARS) for c in ("device", "checksum", "status", "pick")),
        ("candidates", MAX_TEXT_CHARS),
        ("seconds", None),
        ("measured_at", None),
    ),
    "tunes",
)
TUNE_COLUMNS = (
    "key, operation, shape_key, device, checksum, status, pick, candidates, seconds, measured_at"
)
KERNEL_WIDTH = KERNEL_COLUMNS.count(",") + 1  # the signed columns lead each bounded select
TUNE_WIDTH = TUNE_COLUMNS.count(",") + 1
# What a signature covers: every row, each table's columns but its times of use.
SIGNED_ROWS = (
    ("manifest", "SELECT key, value FROM manifest WHERE key IS NOT 'updated'"),
    ("fingerprints", "SELECT identity, kind, data FROM fingerprints"),
    ("blobs", "SELECT sha256, size FROM blobs"),
    ("kernels", f"SELECT {KERNEL_COLUMNS} FROM kernels"),
    ("tunes", f"SELECT {TUNE_COLUMNS} FROM tunes"),
)
_DELETE_UNUSED_FINGERPRINTS = """
DELETE FROM fingerprints WHERE
    (kind = 'toolchain' AND substr(identity, 11) NOT IN (SELECT toolchain FROM kernels))
 OR (kind = 'device' AND substr(identity, 8) NOT IN (SELECT device FROM tunes)
     AND NOT EXISTS (SELECT 1 FROM kernels
         WHERE backend = json_extract(fingerprints.data, '$.backend')
           AND arch = json_extract(fingerprints.data, '$.arch')))
"""
_HEX64 = re.compile(r"[0-9a-f]{64}")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SYMBOL = re.compile(r"warm_[0-9a-f]{16}_[A-Za-z_][A-Za-z0-9_]*")
_T = TypeVar("_T")


class BundleError(WarmError):
    """A bundle is missing, corrupt, foreign, or of another format version."""

    @property
    def problem(self) -> str:
        """The message without the bundle's path it starts with."""
        return str(self).split(": ", 1)[-1]


OnError = Callable[[str, str], None]  # (an entry's key, what is wrong with it)


def _corrupt(what: str, key: object, exc: Exception) -> str:
    """What is wrong with one row, naming the entry by the start of its key."""
    name = key[:16] if isinstance(key, str) else "?"
    return f"corrupt {what} entry {name!r} ({exc})"


class _Malformed(ValueError):
    """One field of one row is not what warm writes (caught and named as a `BundleError`)."""


def read_header(path: Path) -> tuple[int, int, bool]:
    """The file's SQLite header, checked: its `(application_id, user_version, wal)`;
    `FileNotFoundError` if there is no file.

    The first two are header fields (at offsets 68 and 60, big-endian), read here without
    SQL; warm never changes them after a bundle is created. `wal` is whether the file
    format bytes (18 and 19) say write-ahead-log mode, which warm never sets.
    """
    try:
        with open(path, "rb", buffering=0) as fh:
            head = fh.read(SQLITE_HEADER_BYTES)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise BundleError(f"{path}: cannot read bundle: {exc.strerror}") from None
    if not head:
        raise BundleError(f"{path}: not a warm bundle (an empty file)")
    if head[: len(SQLITE_MAGIC)] != SQLITE_MAGIC:
        raise BundleError(f"{path}: not a warm bundle (not an SQLite file)")
    if len(head) < SQLITE_HEADER_BYTES:
        raise BundleError(f"{path}: corrupt bundle (its SQLite header is cut short)")
    field = functools.partial(int.from_bytes, byteorder="big", signed=True)
    return field(head[68:72]), field(head[60:64]), WAL_FORMAT in (head[18], head[19])


def _is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


def _connect(target: str | Path, *, uri: bool = False) -> sqlite3.Connection:
    # One connection per open bundle, shared by every thread of the process (the runtime may
    # launch from worker threads); `Bundle` serialises its use with a lock.
    conn = sqlite3.connect(
        target,
        uri=uri,
        timeout=BUSY_TIMEOUT_MS / 1000,
        isolation_level=None,
        check_same_thread=False,
    )
    # A bundle's schema is untrusted: SQL functions with side effects never run from it,
    # and (where this Python exposes it) SQLite's defensive mode forbids writing the
    # schema or the file's pages directly. `timeout` is SQLite's busy timeout.
    conn.execute("PRAGMA trusted_schema = OFF")
    defensive = getattr(sqlite3, "SQLITE_DBCONFIG_DEFENSIVE", None)
    if defensive is not None and hasattr(conn, "setconfig"):
        conn.setconfig(defensive, True)
    return conn


def _read_only_uri(path: Path) -> str:
    """`file:` URI of `path`, opened read-only: its bytes percent-encoded as they are on
    disk (a name need not be UTF-8), with an empty authority (a path may start `//`)."""
    return f"file://{quote(os.fsencode(os.path.abspath(path)))}?mode=ro"


def _recover(path: Path) -> None:
    """Roll back a write a crash interrupted, so a read-only open sees the state before it.

    SQLite rolls a hot journal back on the first read, but only through a connection
    that may write; a read-only one fails instead. The rollback takes SQLite's own
    locks, never warm's file lock, so readers never wait for warm's writers.
    """
    journal = Path(f"{path}-journal")
    try:
        if os.stat(journal).st_size == 0:
            return
    except FileNotFoundError:
        return
    problem = f"a write was interrupted ({journal.name} is left)"
    _mend(path, problem, "roll the write back", "SELECT count(*) FROM sqlite_master")


def _mend(path: Path, problem: str, remedy: str, sql: str) -> tuple[Any, ...] | None:
    """Run `sql` once through a connection that may write (what a read-only open cannot
    mend); refused, naming `problem`, where the file cannot be written."""
    if not (os.access(path, os.W_OK) and os.access(path.parent, os.W_OK)):
        raise BundleError(
            f"{path}: {problem}; open the bundle once where it is writable to {remedy}"
        )
    conn = _connect(path)
    try:
        return _retrying(path, lambda: conn.execute(sql).fetchone())
    finally:
        conn.close()


def _leave_wal(path: Path) -> None:
    """Switch a bundle whose header says write-ahead-log mode back to a rollback journal
    (what warm writes, so a read-only copy opens); refused where the file cannot be written.

    The switch checkpoints any `-wal` file into the bundle; what it holds is checked with
    the rest when the bundle is opened.
    """
    problem = "the bundle is in WAL mode, which warm does not read"
    row = _mend(path, problem, "switch it back", "PRAGMA journal_mode = DELETE")
    if row is None or str(row[0]).lower() != "delete":
        raise BundleError(f"{path}: the bundle is in WAL mode and could not be switched back")


def _retrying(path: Path, op: Callable[[], _T]) -> _T:
    """Run one SQLite operation; retry "database is locked" past the busy timeout."""
    for attempt in range(LOCK_RETRIES + 1):
        try:
            return op()
        except sqlite3.Error as exc:
            if not _is_busy(exc):
                raise
            if attempt == LOCK_RETRIES:
                raise BundleError(
                    f"{path}: bundle stayed locked by another process ({exc})"
                ) from None
            time.sleep(min(2.0, 0.05 * 2**attempt))
    raise AssertionError("unreachable")  # pragma: no cover


def _disk_full(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code == sqlite3.SQLITE_FULL if code is not None else "disk is full" in str(exc)


@contextmanager
def _sqlite_errors(path: Path) -> Iterator[None]:
    """Every SQLite failure, as a one-line `BundleError`; a full disk is said to be one
    (the write was rolled back: the bundle is as it was, never "corrupt")."""
    try:
        yield
    except sqlite3.Error as exc:
        if _disk_full(exc):
            raise BundleError(
                f"{path}: {DISK_FULL}: nothing was written, the bundle is unchanged"
            ) from None
        what = "cannot write the bundle" if "readonly" in str(exc) else "corrupt bundle"
        raise BundleError(f"{path}: {what} ({exc})") from None


def _open_connection(path: Path, write: bool) -> tuple[sqlite3.Connection, tuple[int, int]]:
    """A checked connection to the bundle at `path` (`FileNotFoundError` if there is none)
    and the (device, inode) of the file it opened."""
    app, version, wal = read_header(path)
    with _sqlite_errors(path):
        if wal:
            _leave_wal(path)
        st = os.stat(path)  # before connecting: a file replaced meanwhile is seen at a write
        if write:
            conn = _connect(path)
        else:
            _recover(path)
            conn = _connect(_read_only_uri(path), uri=True)
        try:
            _validate(path, conn, app, version)
        except BaseException:
            conn.close()
            raise
    return conn, (st.st_dev, st.st_ino)


def _validate(path: Path, conn: sqlite3.Connection, app: int, version: int) -> None:
    if app != APPLICATION_ID:
        raise BundleError(f"{path}: not a warm bundle (an SQLite file of another application)")
    if version != FORMAT_VERSION:
        raise BundleError(
            f"{path}: bundle format version {version}, this warm reads {FORMAT_VERSION}"
        )
    expected = warm_schema(SCHEMA)
    select = f"{SCHEMA_SELECT} LIMIT {len(expected) + 8}"
    rows = _retrying(path, lambda: conn.execute(select).fetchall())
    problems = schema_problems(rows, expected)
    if problems and not schema_problems(rows, warm_schema(BASE_SCHEMA)):
        problems = []  # a bundle made before signatures existed: it opens as unsigned
    if problems:  # a trigger, a view, a generated column... could run or change anything
        more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
        raise BundleError(
            f"{path}: refused: its schema is not warm's ({'; '.join(problems[:3])}{more})"
        )


@contextmanager
def write_lock(path: Path) -> Iterator[None]:
    """warm's write lock of the bundle at `path` (`<bundle>.lock`, which readers never
    take); a lock file that cannot be made is a one-line `BundleError`."""
    from filelock import FileLock  # imported on first use: a serving process never writes

    lock = FileLock(f"{path}.lock")
    try:
        lock.acquire()
    except OSError as exc:
        raise BundleError(f"{path}: cannot take the write lock {lock.lock_file}: {exc}") from None
    try:
        yield
    finally:
        lock.release()


def _write_empty(tmp: Path) -> None:
    """A new, empty bundle at `tmp`: warm's schema, ids and manifest."""
    conn = sqlite3.connect(tmp, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = DELETE")
        conn.executescript(
            f"BEGIN; {SCHEMA} PRAGMA application_id = {APPLICATION_ID}; "
            f"PRAGMA user_version = {FORMAT_VERSION}; COMMIT;"
        )
        now = repr(time.time())
        conn.executemany(
            "INSERT INTO manifest VALUES (?, ?)",
            [
                ("format_version", str(FORMAT_VERSION)),
                ("warm_version", __version__),
                ("created", now),
                ("updated", now),
            ],
        )
    finally:
        conn.close()


class Bundle:
    """An open bundle file; see the module doc."""

    def __init__(
        self, path: Path, conn: sqlite3.Connection, writable: bool, ident: tuple[int, int]
    ) -> None:
        self.path = path
        self._conn = conn
        self.writable = writable
        self._ident = ident  # the (device, inode) of the file `_conn` opened
        self._swept = False  # leftovers of dead writers removed (at the first write)
        self._lock = threading.RLock()
        self.covered: RowSet | None = None  # under trusted keys: the row hashes served
        self._refused: set[str] = set()  # keys of rows held but not covered
        self.written: set[tuple[str, str]] = set()  # (table, key) this object wrote

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        write: bool = False,
        trusted_keys: Sequence[bytes] | None = None,
    ) -> Bundle:
        """Open an existing bundle (read-only unless `write`); `create` makes a new one.

        With `trusted_keys` (raw Ed25519 public keys), a bundle holding entries that no
        trusted key signed is refused, and only rows they signed are served.
        """
        path = Path(path)
        if write and path.is_file() and path.stat().st_size == 0:  # as `mktemp` makes it
            return cls.create(path)._trusting(trusted_keys)
        try:
            conn, ident = _open_connection(path, write)
        except FileNotFoundError:
            if write:
                return cls.create(path)._trusting(trusted_keys)
            raise BundleError(f"{path}: no such bundle") from None
        return cls(path, conn, write, ident)._trusting(trusted_keys)

    def _trusting(self, trusted_keys: Sequence[bytes] | None) -> Bundle:
        if trusted_keys is None:
            return self
        from warmcli.bundle.signing import covered  # the signing layer sits above this module

        try:
            self.covered = covered(self, trusted_keys)
        except BaseException:
            self.close()
            raise
        return self

    @classmethod
    def create(cls, path: str | os.PathLike[str]) -> Bundle:
        """Create a new bundle file (or open it if another process just did)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with write_lock(path):
            if path.exists() and path.stat().st_size > 0:
                return cls.open(path, write=True)
            remove_leftovers(path)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            try:
                tmp.unlink(missing_ok=True)
                with _sqlite_errors(path):
                    _write_empty(tmp)
                os.replace(tmp, path)  # a crash before this leaves no bundle, never half of one
            except BaseException:
                unlink_all(tmp, Path(f"{tmp}-journal"))
                raise
        bundle = cls.open(path, write=True)
        bundle.written.update(("manifest", k) for k in bundle.manifest())
        return bundle

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> Bundle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------

    @contextmanager
    def _reading(self, limit: int = MAX_VALUE_BYTES) -> Iterator[None]:
        """Hold the connection, with SQLite refusing (as an error) to load any value longer
        than `limit` bytes, so no hostile value is loaded whole (Python 3.11+ sets the limit;
        on 3.10 the `length()` checks of `_bounded_select` alone keep it out of Python)."""
        setlimit = getattr(self._conn, "setlimit", None)  # Python 3.11+
        with self._lock, _sqlite_errors(self.path):
            if setlimit is None:
                yield
                return
            before = setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limit)
            try:
                yield
            finally:
                setlimit(sqlite3.SQLITE_LIMIT_LENGTH, before)

    def _all(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        with self._reading():
            return _retrying(self.path, lambda: self._conn.execute(sql, params).fetchall())

    def _one(
        self, sql: str, params: tuple[object, ...] = (), limit: int = MAX_VALUE_BYTES
    ) -> tuple[Any, ...] | None:
        with self._reading(limit):
            return _retrying(self.path, lambda: self._conn.execute(sql, params).fetchone())

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Every read inside sees one state of the file (one read transaction): a writer's
        commit waits until it ends, so what is read together agrees."""
        with self._lock, _sqlite_errors(self.path):
            self._conn.execute("BEGIN")  # deferred: the first read takes the shared lock
            try:
                yield
            finally:
                if self._conn.in_transaction:
                    self._conn.execute("COMMIT")  # nothing was written: the read ends

    def _iter(self, sql: str, params: tuple[object, ...] = ()) -> Iterator[tuple[Any, ...]]:
        """The rows of `sql`, fetched `READ_BATCH` at a time: memory stays that of a batch."""
        with self._reading():
            cursor = _retrying(self.path, lambda: self._conn.execute(sql, params))
        try:
            while True:
                with self._reading():
                    rows = cursor.fetchmany(READ_BATCH)
                if not rows:
                    return
                yield from rows
        finally:
            with self._lock, contextlib.suppress(sqlite3.ProgrammingError):  # closed already
                cursor.close()

    def manifest(self) -> dict[str, str]:
        rows = self._all("SELECT key, value FROM manifest")
        return dict(self._parse("manifest", r[0], lambda r=r: _manifest_row(r)) for r in rows)

    def fingerprints(self) -> list[dict[str, object]]:
        rows = self._all("SELECT identity, kind, data FROM fingerprints ORDER BY kind, identity")
        return [self._parse("fingerprint", r[0], lambda r=r: _fingerprint(r)) for r in rows]

    def kernel(
        self, key: str, fetched: Mapping[str, tuple[Any, ...]] | None = None
    ) -> KernelRecord | None:
        """The kernel under `key` (None if absent, or not covered under trusted keys); its row
        is taken from `fetched` (`kernel_rows`) when there, else read. Checked either way."""
        row = fetched.get(key) if fetched is not None else None
        if row is None:
            row = self._one(f"{KERNEL_SELECT} WHERE key = ?", (key,))
        if row is None or not self._serves("kernels", key, row[:KERNEL_WIDTH]):
            return None
        return self._parse("kernel", row[0], lambda: _kernel_record(row))

    def kernel_rows(self, backend: str, arch: str) -> dict[str, tuple[Any, ...]]:
        """Kernel rows built for `backend` and `arch`, unchecked, streamed in few queries:
        what a device may serve, for `kernel(key, fetched)` to check and parse one at a
        time. Bounded whatever the bundle holds: only rows whose texts total at most
        `PREFETCH_ROW_CHARS`, and no more than `PREFETCH_CHARS` in all; a row left out
        is read by its key when asked for."""
        texts = " + ".join(
            f"ifnull(length({c}), 0)" for c in ("label", "components", "compile_log")
        )
        small = f"{texts} <= {PREFETCH_ROW_CHARS}"
        rows: dict[str, tuple[Any, ...]] = {}
        total = 0
        where = f"WHERE backend = ? AND arch = ? AND {small}"
        for row in self._iter(f"{KERNEL_SELECT} {where}", (backend, arch)):
            total += sum(len(v) for v in row if isinstance(v, str | bytes))
            if total > PREFETCH_CHARS:
                break
            if isinstance(row[0], str):
                rows[row[0]] = row
        return rows

    def kernels(
        self, entry: str | None = None, on_error: OnError | None = None
    ) -> list[KernelRecord]:
        """Every kernel (or those of one entry name), by device, arch and label."""
        return list(self.each_kernel(entry, on_error))

    def each_kernel(
        self, entry: str | None = None, on_error: OnError | None = None, *, order: str = ""
    ) -> Iterator[KernelRecord]:
        """`kernels`, streamed: one record at a time, never the whole table in memory
        (`order`: `BY_KEY`, `AS_STORED` (fastest), else by device, arch and label).

        A malformed row raises `BundleError`, or with `on_error` is handed to it (its key
        and the problem) and skipped."""
        rows = self._rows(KERNEL_SELECT, order or "device, arch, label", "entry", entry)
        return self._each("kernel", _kernel_record, rows, on_error)

    def keys(self, table: str) -> Iterator[tuple[str, object]]:
        """(key, pick) of every tune (table "tunes"; a kernel's pick is None), ordered by
        key and streamed, without reading the rest of the row; `BundleError` if a key is
        not a sha256 in hex."""
        assert table in ("kernels", "tunes")
        bad = self._one(
            f"SELECT 1 FROM {table} WHERE typeof(key) != 'text' OR length(key) != 64 "
            "OR key GLOB '*[^0-9a-f]*' LIMIT 1"
        )
        if bad is not None:
            raise BundleError(f"{self.path}: corrupt bundle ({table} hold a key not a sha256)")
        pick = f"CASE WHEN length(pick) <= {MAX_NAME_CHARS} THEN pick END"
        return self._iter(
            f"SELECT key, {pick if table == 'tunes' else 'NULL'} FROM {table} ORDER BY key"
        )

    def each_orphan(self) -> Iterator[KernelRecord]:
        """The well-formed kernels whose blob the bundle does not hold, streamed."""
        orphans = f"{KERNEL_SELECT} WHERE sha256 NOT IN (SELECT sha256 FROM blobs)"
        rows = self._iter(f"{orphans} ORDER BY device, arch, label")
        return self._each("kernel", _kernel_record, rows, lambda *_: None)

    def each_kernel_used(
        self, on_error: OnError | None = None, *, order: str = ""
    ) -> Iterator[tuple[KernelRecord, tuple[float, float]]]:
        """Every kernel with its (created, last_used) times, streamed as `each_kernel`."""
        select = KERNEL_SELECT.replace(" FROM kernels", ", created, last_used FROM kernels")

        def parse(row: tuple[Any, ...]) -> tuple[KernelRecord, tuple[float, float]]:
            return _kernel_record(row[:-2]), _usage_row((row[0], *row[-2:]))[1]

        rows = self._rows(select, order or "device, arch, label", "entry", None)
        return self._each("kernel", parse, rows, on_error)

    def blob(self, sha256: str) -> bytes:
        """A binary by its sha256; raises `BundleError` if it is missing or does not match."""
        short = str(sha256)[:16]
        row = self._one(  # one query; an oversized blob's data is never read into memory
            "SELECT size, length(data), typeof(data), "
            "CASE WHEN length(data) <= ? THEN data END FROM blobs WHERE sha256 = ?",
            (MAX_BLOB_BYTES, sha256),
            MAX_BLOB_BYTES,
        )
        if row is None or row[2] != "blob":
            raise BundleError(f"{self.path}: blob {short} is missing")
        size, length, _, data = row
        if length > MAX_BLOB_BYTES:
            raise BundleError(f"{self.path}: blob {short} is {length} bytes, over the limit")
        if not isinstance(data, bytes) or hashlib.sha256(data).hexdigest() != sha256:
            raise BundleError(f"{self.path}: blob {short} does not match its sha256")
        if size != length:
            raise BundleError(f"{self.path}: blob {short} is {length} bytes, its entry says {size}")
        return data

    def tune(self, key: str) -> TuneRecord | None:
        """The tune under `key` (None if absent, or not covered under trusted keys)."""
        row = self._one(f"{TUNE_SELECT} WHERE key = ?", (key,))
        if row is None or not self._serves("tunes", key, row[:TUNE_WIDTH]):
            return None
        return self._parse("tune", row[0], lambda: _tune_record(row))

    def _serves(self, table: str, key: str, signed: tuple[Any, ...]) -> bool:
        """Whether a row may be served: always, unless trusted keys did not sign it."""
        if self.covered is None:
            return True
        from warmcli.bundle.signing import row_hash

        if row_hash(table, signed) in self.covered:
            return True
        with self._lock:
            self._refused.add(key)
        return False

    def refused(self, key: str) -> bool:
        """Whether the bundle holds `key` but no trusted key signed that row."""
        with self._lock:
            return key in self._refused

    # -- signatures (see `warmcli.bundle.signing`) -----------------------------------------------

    def row_hashes(self) -> Iterator[tuple[str, str, bytes]]:
        """(table, the row's key, its `row_hash`) of every signed row, read one at a time."""
        from warmcli.bundle.signing import row_hash

        for table, select in SIGNED_ROWS:
            with self._lock, _sqlite_errors(self.path):
                cursor = _retrying(self.path, lambda s=select: self._conn.execute(s))
                for row in cursor:
                    yield table, str(row[0])[:MAX_NAME_CHARS], row_hash(table, row)

    def signatures(self, keys: Sequence[bytes] | None = None) -> list[StoredSignature]:
        """The signatures the bundle stores (those of `keys`, raw public keys, if given),
        read and type-checked but not verified."""
        from warmcli.bundle.signing import StoredSignature

        if self._one("SELECT 1 FROM sqlite_master WHERE name = 'signatures'") is None:
            return []  # a bundle made before signatures existed
        wanted = "" if keys is None else f"WHERE public_key IN ({', '.join('?' * len(keys))})"
        rows = self._all(  # a list over the size limit is never read (the signature is invalid)
            "SELECT key_id, public_key, signature, signed_at, CASE WHEN length(rows) <= ? "
            f"THEN rows END FROM signatures {wanted} ORDER BY key_id",
            (MAX_BLOB_BYTES, *(keys or ())),
        )

        def parse(row: tuple[Any, ...]) -> StoredSignature:
            key_id, public, signature, signed_at, hashes = row
            for name, value in (("public_key", public), ("signature", signature), ("rows", hashes)):
                if not isinstance(value, bytes):
                    raise _Malformed(f"{name}: not a blob within the limit")
            return StoredSignature(
                _named("key_id", _key_id, key_id),
                public,
                signature,
                hashes,
                _named("signed_at", _seconds, signed_at),
            )

        return [self._parse("signature", r[0], lambda r=r: parse(r)) for r in rows]

    def sign(
        self, make: Callable[[Iterator[tuple[str, str, bytes]]], StoredSignature]
    ) -> StoredSignature:
        """Store `make(row_hashes)`, made and stored in one write transaction (replacing
        the same key's earlier signature)."""
        with self.transaction() as conn:
            signature = make(self.row_hashes())
            conn.execute(SIGNATURES_SCHEMA.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS"))
            conn.execute(
                "INSERT OR REPLACE INTO signatures VALUES (?, ?, ?, ?, ?)",
                (
                    signature.key_id,
                    signature.public_key,
                    signature.signature,
                    signature.rows,
                    signature.signed_at,
                ),
            )
        return signature

    def holds_entries(self) -> bool:
        row = self._one("SELECT EXISTS (SELECT 1 FROM kernels) OR EXISTS (SELECT 1 FROM tunes)")
        return bool(row and row[0])

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
    ) -> Iterator[TuneRecord]:
        """`tunes`, streamed as `each_kernel` (at most `limit` rows, unless negative; by
        operation and shape unless `order` says otherwise)."""
        rows = self._rows(
            TUNE_SELECT, order or "operation, shape_key", "operation", operation, limit
        )
        return self._each("tune", _tune_record, rows, on_error)

    def _rows(
        self, select: str, order: str, column: str, value: str | None, limit: int = -1
    ) -> Iterator[tuple[Any, ...]]:
        """The rows of `select` (those whose `column` is `value`, if given), streamed."""
        where, params = (f"WHERE {column} = ?", (value,)) if value is not None else ("", ())
        return self._iter(f"{select} {where} ORDER BY {order} LIMIT ?", (*params, limit))

    def _each(
        self,
        what: str,
        parse: Callable[[tuple[Any, ...]], _T],
        rows: Iterable[tuple[Any, ...]],
        on_error: OnError | None,
    ) -> Iterator[_T]:
        for row in rows:
            try:
                record = parse(row)
            except _Malformed as exc:
                if on_error is None:
                    raise BundleError(f"{self.path}: {_corrupt(what, row[0], exc)}") from None
                on_error(str(row[0])[:MAX_NAME_CHARS], _corrupt(what, row[0], exc))
                continue
            yield record

    def foreign(self, backend: str, arch: str, toolchains: Iterable[str], device: str) -> list[str]:
        """What the bundle holds for this backend that another toolchain built (for `arch`)
        or another device measured: one line per toolchain or device, never served here."""
        ours = set(toolchains)
        lines = []
        for toolchain, n in self._all(
            "SELECT toolchain, count(*) FROM kernels WHERE backend = ? AND arch = ? "
            "GROUP BY toolchain",
            (backend, arch),
        ):
            if toolchain not in ours:
                theirs = self._parse(
                    "kernel", "?", lambda t=toolchain: _named("toolchain", _name, t)
                )
                lines.append(f"{n} kernel(s) for {arch} built by {theirs[:120]!r}")
        for identity, n in self._all("SELECT device, count(*) FROM tunes GROUP BY device"):
            if identity != device and str(identity).startswith(backend + "|"):
                theirs = self._parse("tune", "?", lambda d=identity: _named("device", _name, d))
                lines.append(f"{n} tune(s) measured on {theirs[:120]!r}")
        return lines

    def counts(self) -> dict[str, int]:
        return {
            t: int(self._one(f"SELECT count(*) FROM {t}")[0]) for t in ("kernels", "blobs", "tunes")
        }  # type: ignore[index]

    def _parse(self, what: str, key: object, parse: Callable[[], _T]) -> _T:
        """Run a row parser; a malformed field becomes a `BundleError` naming the entry."""
        try:
            return parse()
        except _Malformed as exc:
            raise BundleError(f"{self.path}: {_corrupt(what, key, exc)}") from None

    # -- writing ---------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, under the bundle's file lock (other writers wait)."""
        if not self.writable:
            raise BundleError(f"{self.path}: bundle is open read-only")
        with write_lock(self.path), self._lock, _sqlite_errors(self.path):
            self._follow_replacement()
            if not self._swept:
                remove_leftovers(self.path)
                self._swept = True
            conn = self._conn
            _retrying(self.path, lambda: conn.execute("BEGIN IMMEDIATE"))
            try:
                yield conn
                conn.execute(
                    "INSERT OR REPLACE INTO manifest VALUES ('updated', ?)", (repr(time.time()),)
                )
                _retrying(self.path, lambda: conn.execute("COMMIT"))
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def put(
        self,
        kernels: Iterable[tuple[KernelRecord, bytes]] = (),
        tunes: Iterable[TuneRecord] = (),
        fingerprints: Iterable[tuple[str, str, dict[str, object]]] = (),
    ) -> tuple[int, int]:
        """Store kernels (with their binaries), tunes and fingerprints in one transaction."""
        now = time.time()
        n_kernels = n_tunes = 0
        with self.transaction() as conn:
            for identity, kind, data in fingerprints:
                conn.execute(
                    "INSERT OR REPLACE INTO fingerprints VALUES (?, ?, ?)",
                    (identity, kind, json.dumps(data, sort_keys=True)),
                )
                self.written.add(("fingerprints", identity))
            replaced: set[str] = set()  # blobs of rebuilt kernels: freed when none uses them
            for record, binary in kernels:
                old = conn.execute("SELECT sha256 FROM kernels WHERE key = ?", (record.key,))
                replaced.update(str(r[0]) for r in old.fetchall() if r[0] != record.sha256)
                conn.execute(
                    "INSERT OR REPLACE INTO blobs VALUES (?, ?, ?)",  # mends a corrupt one
                    (record.sha256, len(binary), sqlite3.Binary(binary)),
                )
                conn.execute(
                    "INSERT OR REPLACE INTO kernels VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        record.key,
                        record.device,
                        record.backend,
                        record.arch,
                        record.entry,
                        record.label,
                        record.symbol,
                        record.sha256,
                        record.toolchain,
                        json.dumps(record.components, sort_keys=True),
                        _clip(record.compile_log),
                        record.seconds,
                        now,
                        now,
                    ),
                )
                self.written.update((("blobs", record.sha256), ("kernels", record.key)))
                n_kernels += 1
            conn.executemany(
                "DELETE FROM blobs WHERE sha256 = ? AND sha256 NOT IN (SELECT sha256 FROM kernels)",
                [(sha,) for sha in replaced],
            )
            for tune in tunes:
                conn.execute(
                    "INSERT OR REPLACE INTO tunes VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    (
                        tune.key,
                        tune.operation,
                        tune.shape_key,
                        tune.device,
                        tune.checksum,
                        tune.status,
                        tune.pick,
                        tune.candidates_json(),
                        tune.seconds,
                        tune.measured_at,
                        now,
                    ),
                )
                self.written.add(("tunes", tune.key))
                n_tunes += 1
        return n_kernels, n_tunes

    # -- maintenance: usage times, removal, integrity (warm clean, merge, verify) -----------

    def usage(self) -> dict[str, tuple[float, float]]:
        """Every kernel's (created, last_used) times, by key."""
        rows = self._all("SELECT key, created, last_used FROM kernels")
        return dict(self._parse("kernel", r[0], lambda r=r: _usage_row(r)) for r in rows)

    def usage_of(self, keys: Sequence[str]) -> dict[str, tuple[float, float]]:
        """The (created, last_used) times of the kernels under `keys` (a listing's, bounded)."""
        found: dict[str, tuple[float, float]] = {}
        for start in range(0, len(keys), 500):
            chunk = list(keys[start : start + 500])
            marks = ", ".join("?" * len(chunk))
            rows = self._all(
                f"SELECT key, created, last_used FROM kernels WHERE key IN ({marks})", tuple(chunk)
            )
            for r in rows:
                key, times = self._parse("kernel", r[0], lambda r=r: _usage_row(r))
                found[key] = times
        return found

    def touch(self, last_used: Mapping[str, float]) -> int:
        """Set kernels' `last_used` times (a load by a writing process, a merge); returns rows."""
        if not last_used:
            return 0
        with self.transaction() as conn:
            cursor = conn.executemany(
                "UPDATE kernels SET last_used = ? WHERE key = ?",
                [(when, key) for key, when in last_used.items()],
            )
            return cursor.rowcount

    def delete(self, kernel_keys: Iterable[str] = (), tune_keys: Iterable[str] = ()) -> int:
        """Remove kernels and tunes, then every blob no kernel refers to and every fingerprint
        no entry is left from (a toolchain no kernel was built by, a device no tune was
        measured on and no kernel was built for); returns blobs removed."""
        with self.transaction() as conn:
            conn.executemany("DELETE FROM kernels WHERE key = ?", [(k,) for k in kernel_keys])
            conn.executemany("DELETE FROM tunes WHERE key = ?", [(k,) for k in tune_keys])
            cursor = conn.execute(
                "DELETE FROM blobs WHERE sha256 NOT IN (SELECT sha256 FROM kernels)"
            )
            removed = cursor.rowcount
            conn.execute(_DELETE_UNUSED_FINGERPRINTS)
            return removed

    def vacuum(self) -> None:
        """Give freed pages back to the file system, under the bundle's lock."""
        if not self.writable:
            raise BundleError(f"{self.path}: bundle is open read-only")
        with write_lock(self.path), self._lock, _sqlite_errors(self.path):
            self._follow_replacement()
            _retrying(self.path, lambda: self._conn.execute("VACUUM"))

    def _follow_replacement(self) -> None:
        """Under the write lock: when the path names another file than the one open (a
        merge published over it, holding this lock), write to that one, never to a file
        nobody can see any more."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            raise BundleError(f"{self.path}: the bundle was removed while open") from None
        if (st.st_dev, st.st_ino) == self._ident:
            return
        conn, self._ident = _open_connection(self.path, write=True)
        self._conn.close()
        self._conn = conn

    def tune_keys(self) -> list[str]:
        rows = self._all("SELECT key FROM tunes ORDER BY key")
        return [self._parse("tune", r[0], lambda r=r: _named("key", _hex64, r[0])) for r in rows]

    def blob_digests(self) -> Iterator[tuple[str, int, str]]:
        """(stored sha256, stored size, sha256 of the data) of every blob, read one at a time.

        A blob that is not binary, or over the size limit, has the digest "" (never read).
        """
        for (sha,) in self._iter("SELECT sha256 FROM blobs ORDER BY sha256"):
            row = self._one(
                "SELECT size, length(data), typeof(data) FROM blobs WHERE sha256 IS ?", (sha,)
            )
            if row is None:
                continue
            size, length, kind = row
            actual = ""
            if kind == "blob" and isinstance(length, int) and length <= MAX_BLOB_BYTES:
                data = self._one("SELECT data FROM blobs WHERE sha256 IS ?", (sha,), MAX_BLOB_BYTES)
                if data is not None and isinstance(data[0], bytes):
                    actual = hashlib.sha256(data[0]).hexdigest()
            stored_size = size if isinstance(size, int) and not isinstance(size, bool) else -1
            yield str(sha)[:MAX_NAME_CHARS], stored_size, actual

    def integrity_check(self) -> list[str]:
        """SQLite's own page-level check: [] when the file is sound."""
        rows = [str(r[0]) for r in self._all("PRAGMA integrity_check")]
        return [] if rows == ["ok"] else rows

    # -- aggregates (`warm stats` on a bundle too large to list) ----------------------------

    def aggregate(
        self, sample: int = 0, operation: str | None = None
    ) -> tuple[list[tuple[str, str, int, int]], list[tuple[str, str, int, int]], list[TuneRecord]]:
        """Counts by SQL, without reading every entry: (device, arch, kernels, bytes of their
        distinct blobs) and (operation, device, tunes, pending), plus `sample` tunes read
        whole: of `operation` only, by shape, if given; else as many of each operation as fit,
        by shape (a malformed one is left out)."""
        kernel_rows = self._all(
            "SELECT k.device, k.arch, k.n, coalesce(b.bytes, 0) FROM "
            "(SELECT device, arch, count(*) AS n FROM kernels GROUP BY device, arch) AS k "
            "LEFT JOIN (SELECT device, arch, sum(size) AS bytes FROM "
            "(SELECT DISTINCT device, arch, sha256 FROM kernels) JOIN blobs USING (sha256) "
            "GROUP BY device, arch) AS b USING (device, arch) ORDER BY k.device, k.arch"
        )
        tune_rows = self._all(
            "SELECT operation, device, count(*), sum(status = 'pending') FROM tunes "
            "GROUP BY operation, device ORDER BY operation, device"
        )

        def group(row: tuple[Any, ...]) -> tuple[str, str, int, int]:
            a, b = _named("name", _name, row[0]), _named("name", _name, row[1])
            return a, b, int(row[2] or 0), int(row[3] or 0)

        return (
            [self._parse("kernel group", r[0], lambda r=r: group(r)) for r in kernel_rows],
            [self._parse("tune group", r[0], lambda r=r: group(r)) for r in tune_rows],
            list(self.each_tune(operation, limit=sample))
            if operation is not None
            else self._sample_tunes(sample),
        )

    def _sample_tunes(self, sample: int) -> list[TuneRecord]:
        """`sample` tunes, a few of each operation: each one's first by shape, then second..."""
        keys = self._all(
            "SELECT key FROM (SELECT key, operation, row_number() OVER "
            "(PARTITION BY operation ORDER BY shape_key, key) AS nth FROM tunes) "
            "ORDER BY nth, operation LIMIT ?",
            (sample,),
        )
        found = []
        for (key,) in keys:
            with contextlib.suppress(BundleError):  # a malformed one is not shown
                record = self.tune(str(key)[:MAX_NAME_CHARS])
                if record is not None:
                    found.append(record)
        return found

    def operations(self, limit: int) -> list[str]:
        """The first `limit` operations the bundle holds tunes of, by name (well-formed ones)."""
        rows = self._all(
            "SELECT DISTINCT operation FROM tunes ORDER BY operation LIMIT ?", (limit,)
        )
        return [r[0] for r in rows if isinstance(r[0], str) and len(r[0]) <= MAX_NAME_CHARS]

    def count(self, table: str) -> int:
        """How many kernels or tunes the bundle holds."""
        assert table in ("kernels", "tunes")
        row = self._one(f"SELECT count(*) FROM {table}")
        return int(row[0]) if row else 0

    def blob_users(self) -> dict[str, int]:
        """How many kernels use each binary that more than one kernel uses (a batch's)."""
        rows = self._all(
            "SELECT sha256, count(*) FROM kernels WHERE typeof(sha256) = 'text' "
            f"AND length(sha256) <= {MAX_NAME_CHARS} GROUP BY sha256 HAVING count(*) > 1"
        )
        return {str(sha): int(n) for sha, n in rows}

    def has_operation(self, operation: str) -> bool:
        return (
            self._one("SELECT 1 FROM tunes WHERE operation = ? LIMIT 1", (operation,)) is not None
        )


# -- field checks: what warm writes, and nothing else, becomes a record -----------------------


def _clip(log: str) -> str:
    """A compile log cut to what a bundle may hold (its head and its tail)."""
    if len(log) <= MAX_TEXT_CHARS:
        return log
    half = MAX_TEXT_CHARS // 2 - 64
    return f"{log[:half]}\n[... {len(log) - 2 * half} characters cut ...]\n{log[-half:]}"


def _text(value: object, limit: int = MAX_TEXT_CHARS) -> str:
    if not isinstance(value, str):
        raise _Malformed(f"a {type(value).__name__}, not text")
    if len(value) > limit:
        raise _Malformed(f"{len(value)} characters, over the limit of {limit}")
    return value


def _name(value: object) -> str:
    return _text(value, MAX_NAME_CHARS)


def _hex64(value: object) -> str:
    if not isinstance(value, str) or not _HEX64.fullmatch(value):
        raise _Malformed("not a sha256 in hex")
    return value


def _matching(pattern: re.Pattern[str], what: str) -> Callable[[object], str]:
    def check(value: object) -> str:
        if (
            not isinstance(value, str)
            or len(value) > MAX_NAME_CHARS
            or not pattern.fullmatch(value)
        ):
            raise _Malformed(f"not {what}")
        return value

    return check


def _seconds(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Malformed(f"a {type(value).__name__}, not a number")
    if not math.isfinite(value) or value < 0:
        raise _Malformed(f"{value!r} is not a duration")
    return float(value)


def _size(value: object) -> int:
    if value is None:
        return 0  # the blob is missing: the kernel is listed, never served
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_BLOB_BYTES:
        raise _Malformed(f"{value!r} is not a blob size")
    return value


def _json_value(text: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise _Malformed(f"not JSON ({type(exc).__name__})") from None


def _json_object(text: str) -> dict[str, object]:
    value = _json_value(text)
    if not isinstance(value, dict):
        raise _Malformed("not a JSON object")
    return value


def _named(field: str, check: Callable[[object], _T], value: object) -> _T:
    try:
        return check(value)
    except _Malformed as exc:
        raise _Malformed(f"{field}: {exc}") from None


_entry = _matching(_IDENTIFIER, "a C identifier")
_symbol = _matching(_SYMBOL, "a warm kernel symbol")
_key_id = _matching(re.compile(r"[0-9a-f]{16}"), "a key id")
_KERNEL_FIELDS: tuple[tuple[str, Callable[[object], object]], ...] = (
    ("key", _hex64),
    ("device", _name),
    ("backend", _name),
    ("arch", _name),
    ("entry", _entry),
    ("label", _text),
    ("symbol", _symbol),
    ("sha256", _hex64),
    ("toolchain", _name),
    ("components", lambda v: _json_object(_text(v))),
    ("compile_log", _text),
    ("seconds", _seconds),
    ("size", _size),
)
_STATUSES = {"ok", "failed", "pending"}


def _usage_row(row: tuple[object, ...]) -> tuple[str, tuple[float, float]]:
    key, created, last_used = row
    times = _named("created", _seconds, created), _named("last_used", _seconds, last_used)
    return _named("key", _hex64, key), times


def _manifest_row(row: tuple[object, ...]) -> tuple[str, str]:
    key, value = row
    return _named("key", _name, key), _named("value", _text, value)


def _fingerprint(row: tuple[object, ...]) -> dict[str, object]:
    identity, kind, data = row
    parsed = _json_object(_named("data", _text, data))
    return {
        "identity": _named("identity", _name, identity),
        "kind": _named("kind", _name, kind),
        **parsed,
    }


def _within_limits(row: tuple[object, ...]) -> tuple[object, ...]:
    """A row of `_bounded_select` without its last column, which must name no oversized field."""
    if row[-1] is not None:
        field, _, length = str(row[-1]).rpartition(" ")
        raise _Malformed(f"{field}: {length} characters, over the limit")
    return row[:-1]


def _kernel_record(row: tuple[object, ...]) -> KernelRecord:
    fields_row = _within_limits(row)
    fields: dict[str, object] = {}
    name = "?"
    try:  # as `_named` for each field, in one frame: a hot start parses thousands of rows
        for (name, check), value in zip(_KERNEL_FIELDS, fields_row, strict=True):
            fields[name] = check(value)
    except _Malformed as exc:
        raise _Malformed(f"{name}: {exc}") from None
    comps = fields["components"]
    assert isinstance(comps, dict)
    fields["components"] = {str(k): str(v) for k, v in comps.items()}
    return KernelRecord(**fields)  # type: ignore[arg-type]


def _tune_record(row: tuple[object, ...]) -> TuneRecord:
    fields_row = _within_limits(row)
    key, operation, shape_key, device, checksum, status, pick, cands, secs, measured_at = fields_row
    items = _named("candidates", lambda v: _json_value(_text(v)), cands)
    if not isinstance(items, list):
        raise _Malformed("candidates: not a JSON list")
    try:
        candidates = TuneRecord.candidates_from(items)
    except (ValueError, KeyError, TypeError, OverflowError) as exc:
        raise _Malformed(f"candidates: {type(exc).__name__}: {exc}"[:200]) from None
    for c in candidates:
        if c.status not in _STATUSES or len(c.name) > MAX_NAME_CHARS:
            raise _Malformed(f"candidates: a candidate with status {c.status[:20]!r}")
        # A sum of finite times is finite unless one is not (or it overflows: refused too).
        if not math.isfinite(sum(c.samples, c.seconds or 0.0)):
            raise _Malformed(f"candidates: {c.name[:40]!r} has a time that is not finite")
    record_status = _named("status", _name, status)
    if record_status not in ("measured", "pending"):
        raise _Malformed(f"status: {record_status[:20]!r} is not a tune status")
    record = TuneRecord(
        key=_named("key", _hex64, key),
        operation=_named("operation", _name, operation),
        shape_key=_named("shape_key", _text, shape_key),
        device=_named("device", _name, device),
        checksum=_named("checksum", _hex64, checksum),
        status=record_status,
        pick=None if pick is None else _named("pick", _name, pick),
        candidates=candidates,
        seconds=_named("seconds", _seconds, secs),
        measured_at=_named("measured_at", _seconds, measured_at),
    )
    if tune_key(record.operation, record.shape_key, record.device, record.checksum) != record.key:
        raise _Malformed("key: not the key of its operation, shape, device and candidate set")
    if record.status == "measured":  # production serves only a pick that ran: so must verify
        picked = next((c for c in candidates if c.name == record.pick), None)
        if record.pick is None:
            raise _Malformed("pick: a measured tune with no pick")
        if picked is None or picked.status != "ok":
            what = "not one of its candidates" if picked is None else "a candidate that failed"
            raise _Malformed(f"pick: {record.pick[:40]!r} is {what}")
    return record
