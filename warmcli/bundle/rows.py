"""A bundle's rows: the bounded selects that read them and the checks that parse them.

Sizes are read before values: `_bounded_select` reads a text only when its `length()` in SQL is
within its limit (else NULL, naming the column over it), so no row costs more memory than its limits
(and SQLite itself refuses to load any value over `MAX_VALUE_BYTES`; nor where a writer compares a
stored row with its own, `held_alike`). Every field of every row is then checked (type, size,
format; a tune's key against its fields; a measured tune's pick is one of its candidates that ran)
before it becomes a `KernelRecord` (`warmcli.bundle.kernel_row`) or a `TuneRecord`; a field that is
not what warm writes raises `_Malformed`, which `RowReader` (the reads `Bundle` inherits: bounded,
retried, streamed `READ_BATCH` rows at a time) names as a `BundleError` (a listing's rows:
`warmcli.bundle.oversize.each_named`). Its only state is this process's id (`_PROCESS`), a reader's
rows to skip (`skip_rows`: those no listing can read, `warmcli.bundle.unreadable`), and a lock it
waited out once, read-only (`_locked`: no read waits again while `lock_probe.free` finds it held);
it never decides what is served, and opens only a forked child's own connection (`_conn`). A `-wal`
or `-journal` found beside the file as a read starts is judged first (`_settle`)."""

from __future__ import annotations

import _sqlite3 as sqlite3  # as `warmcli.bundle.file`
import contextlib
import ctypes
import json
import math
import os
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from warmcli.bundle.file import _open_connection, _retrying, _sqlite_errors, settle_journal
from warmcli.bundle.flat_json import loads as flat_loads
from warmcli.bundle.journal import check_journal, check_wal_files
from warmcli.bundle.lock_probe import free
from warmcli.errors import REMOVED, BundleError, BundleLocked
from warmcli.once import once
from warmcli.printable import Pattern

if TYPE_CHECKING:
    from pathlib import Path

MAX_BLOB_BYTES = 256 << 20  # a binary larger than this is not a kernel
MAX_NAME_CHARS = 4096  # keys, devices, arches, entries, symbols, toolchains, operations
MAX_TEXT_CHARS = 4 << 20  # labels, compile logs, shape keys, JSON documents
KERNEL_COLUMNS = "key, device, backend, arch, entry, label, symbol, sha256, toolchain, components"
KERNEL_COLUMNS += ", compile_log, seconds"
MAX_VALUE_BYTES = 4 * MAX_TEXT_CHARS + 64  # SQLite refuses to read a longer text (UTF-8)
KEPT_KERNEL_KEYS = 1 << 16  # interned kernel keys an open bundle keeps read
READ_BATCH = 256  # rows fetched at a time while a listing streams
BY_KEY, AS_STORED = "key", "rowid"  # orders of a listing (`Bundle.each_kernel`, `each_tune`)

Column = tuple[str, int | None] | tuple[str, int | None, str]  # (column, limit[, value read])


def _bounded_select(columns: tuple[Column, ...], table: str) -> str:
    """SELECT of `columns`, each text read only when `length()` says it is within its limit
    (else NULL), then one more column naming the first that is over it (NULL when none):
    an oversized value is refused by its length, never read into Python. A column given
    a third item is read as that expression of it (a key stored as bytes, read as hex)."""
    read = [c[2] if len(c) > 2 else c[0] for c in columns]  # type: ignore[misc]
    values = ", ".join(
        r if c[1] is None else f"CASE WHEN length({c[0]}) <= {c[1]} THEN {r} END"
        for c, r in zip(columns, read, strict=True)
    )
    over = " ".join(
        f"WHEN length({c}) > {limit} THEN '{c} ' || length({c})"
        for c, limit, *_ in columns
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
KERNEL_WIDTH = KERNEL_COLUMNS.count(",") + 1  # the signed columns lead each bounded select
# Compiled where first matched (a field checked one by one, a tune's checksum): a kernel
# row as warm writes it is checked by one pattern of their texts (`warmcli.bundle.kernel_row`).
_HEX64 = Pattern(r"[0-9a-f]{64}")
_IDENTIFIER = Pattern(r"[A-Za-z_][A-Za-z0-9_]*")
_SYMBOL = Pattern(r"warm_[0-9a-f]{16}_[A-Za-z_][A-Za-z0-9_]*")
_T = TypeVar("_T")
_PROCESS = [os.getpid()]  # set anew in a forked child: no system call per read
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=lambda: _PROCESS.__setitem__(0, os.getpid()))
OnError = Callable[[str, str], None]  # (an entry's key, what is wrong with it)


def _corrupt(what: str, key: object, exc: Exception) -> str:
    """What is wrong with one row, naming the entry by the start of its key."""
    return f"corrupt {what} entry {(key[:16] if isinstance(key, str) else '?')!r} ({exc})"


class _Malformed(ValueError):
    """One field of one row is not what warm writes (caught and named as a `BundleError`)."""


class _KernelKeys(dict[int, str]):
    """The kernel keys an open bundle has read by id (`RowReader._kernel_key`): a missing
    one is read from its reader (held weakly: the reader holds this) and kept."""

    def __init__(self, reader: weakref.ref[RowReader]) -> None:
        super().__init__()
        self.reader = reader

    def __missing__(self, kernel_id: int) -> str:
        reader = self.reader()
        if reader is None:
            raise ValueError(f"kernel id {kernel_id}: the bundle is gone")
        key = reader._read_kernel_key(kernel_id)
        if len(self) >= KEPT_KERNEL_KEYS:
            self.clear()
        self[kernel_id] = key
        return key


class RowReader:
    """Reads of an open bundle's rows: bounded, retried, streamed a batch at a time, each
    row parsed (`Bundle` and its `BundleAdmin` derive from it; `Bundle` opens `_conn`)."""

    fspath: str  # the file's path, named by every failure (`path` is it as a `Path`)
    writable: bool
    _connection: sqlite3.Connection
    _pid: int  # the process `_connection` was opened in
    _ident: tuple[int, int]  # the (device, inode) of the file it opened
    _real: str  # the file it opened (a link to it followed): its `-wal` is SQLite's
    _lock: threading.RLock
    _other_file: Callable[[], None]  # a forked child opened another file (`SignedRows`)
    _locked: str | None = None  # read-only, waited for `LOCK_WAIT_SECONDS` once: not while held

    @property
    def _conn(self) -> sqlite3.Connection:
        """The connection; in a forked child one of its own, opened on first use: the parent's
        may be in a statement of a thread the child lacks (its mutex held): never used nor freed."""
        if self._pid != _PROCESS[0]:
            inherited, parents = self._connection, self._ident
            try:
                self._conn, self._ident = _open_connection(self.fspath, self.writable)
            except FileNotFoundError:
                raise BundleError(f"{self.fspath}: {REMOVED}") from None
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(inherited))  # never freed here
            if self._ident != parents:  # another file put there since its parent opened one
                self._other_file()
        return self._connection

    @_conn.setter
    def _conn(self, connection: sqlite3.Connection) -> None:
        self._connection, self._pid = connection, _PROCESS[0]
        self._real = os.path.realpath(self.fspath)  # beside it, the files SQLite opens (`_settle`)

    def _close_connection(self) -> None:  # (a forked child's inherited one is never used: `_conn`)
        with self._lock:
            self._connection.close() if self._pid == _PROCESS[0] else None

    @once
    def path(self) -> Path:
        """The bundle's file, made on first use: a process that only serves imports no pathlib."""
        from pathlib import Path

        return Path(self.fspath)

    @contextmanager
    def _reading(self, limit: int = MAX_VALUE_BYTES) -> Iterator[None]:
        """The connection held, settled (`_settle`), SQLite refusing values over `limit` bytes."""
        with self._lock, _sqlite_errors(self.fspath):
            if self._locked is not None and not free(self._conn):  # held still: a miss, unwaited
                raise BundleLocked(self._locked)
            self._locked = None  # (free since: read, and waited for as before)
            self._settle() if not self._conn.in_transaction else None
            before = self._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, limit)
            try:
                yield
            except BundleLocked as exc:
                self._locked = None if self.writable else str(exc)
                raise
            finally:  # (a read left suspended, closed by a stop's teardown after its bundle)
                with contextlib.suppress(sqlite3.ProgrammingError):
                    self._conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, before)

    def _settle(self) -> None:
        """Before a read transaction: a `-wal` or `-journal` found (`os.access`: C) is judged."""
        path = self.fspath  # (a FIFO's open never returns; a link's file, a hard one, is written)
        check_wal_files(path) if os.access(f"{self._real}-wal", 0, follow_symlinks=False) else None
        if self.writable or os.access(f"{self._real}-journal", 0, follow_symlinks=False):
            settle_journal(path, sides=False) if self.writable else check_journal(path)

    def _all(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        with self._reading():
            return _retrying(self.fspath, lambda: self._conn.execute(sql, params).fetchall())

    def _one(
        self, sql: str, params: tuple[object, ...] = (), limit: int = MAX_VALUE_BYTES
    ) -> tuple[Any, ...] | None:
        with self._reading(limit):
            return _retrying(self.fspath, lambda: self._conn.execute(sql, params).fetchone())

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Every read inside sees one state of the file (one read transaction): a writer's
        commit waits until it ends, so what is read together agrees (nested: the outer's)."""
        with self._lock, _sqlite_errors(self.fspath):
            self._settle() if not self._conn.in_transaction else None  # (as `_reading`)
            self._conn.execute("SAVEPOINT snapshot")  # outermost, deferred: read takes the lock
            try:
                yield
            finally:  # closed meanwhile (a listing closed after its bundle): nothing to end
                with contextlib.suppress(sqlite3.ProgrammingError):  # (a closed one says so)
                    self._conn.execute("RELEASE snapshot") if self._conn.in_transaction else None

    @property
    def _kernel_key(self) -> Callable[[int], str]:
        """The kernel key (hex) a format-3 tune's candidates name by an id (its row of
        `tune_kernels`, read once and kept: ids are never renumbered); `ValueError` if the
        bundle holds no such id. Kept ids are bounded (`KEPT_KERNEL_KEYS`), whatever the
        bundle. A kept id costs a dict's lookup: every tune a listing reads names a few."""
        kept: _KernelKeys | None = self.__dict__.get("_kernel_keys")
        if kept is None:
            with self._lock:
                kept = self.__dict__.setdefault("_kernel_keys", _KernelKeys(weakref.ref(self)))
        return kept.__getitem__

    def _read_kernel_key(self, kernel_id: int) -> str:
        by_id = "SELECT CASE WHEN typeof(key) = 'blob' AND length(key) = 32 THEN key END "
        by_id += "FROM tune_kernels WHERE id = ?"  # a text is never decoded (not UTF-8: it fails)
        with self._lock:
            try:
                row = self._conn.execute(by_id, (kernel_id,)).fetchone()
            except sqlite3.Error as exc:
                raise ValueError(f"kernel id {kernel_id}: {exc}") from None
        if row is None or not isinstance(row[0], bytes):  # (nor a key of another size or type)
            raise ValueError(f"kernel id {kernel_id} is not one the bundle holds")
        return row[0].hex()  # type: ignore[no-any-return]

    def _forget_kernel_keys(self) -> None:
        """Another file is open now (a merge replaced it): its ids are its own."""
        with self._lock:
            self.__dict__.pop("_kernel_keys", None)

    def _iter(self, sql: str, params: tuple[object, ...] = ()) -> Iterator[tuple[Any, ...]]:
        """The rows of `sql`, `READ_BATCH` at a time, each batch stepped under the lock."""
        cursor = None  # a one-batch listing ends under the lock a fork waits for: no forked
        try:  # child inherits its shared lock on the file as held (it could never write it)
            with self._reading():
                cursor = _retrying(self.fspath, lambda: self._conn.execute(sql, params))
                rows = cursor.fetchmany(READ_BATCH)
            while True:
                yield from rows
                if len(rows) < READ_BATCH:  # the statement has ended
                    return
                with self._reading():
                    rows = cursor.fetchmany(READ_BATCH)
        finally:
            with self._lock, contextlib.suppress(sqlite3.ProgrammingError):  # closed already
                cursor.close() if cursor is not None else None

    def _rows(
        self, select: str, order: str, column: str, value: str | None, limit: int = -1
    ) -> Iterator[tuple[Any, ...]]:
        """The rows of `select` (whose `column` is `value`, if given), streamed, bar `skip_rows`."""
        where, params = (f"{column} = ?", (value,)) if value is not None else ("1", ())
        where = f"WHERE {where} AND {self.skipped(select.rpartition(' FROM ')[2].split()[0])}"
        return self._iter(f"{select} {where} ORDER BY {order} LIMIT ?", (*params, limit))

    def skip_rows(self, table: str, rowids: list[int]) -> None:
        """Have every listing of `table` skip these rows (`warmcli.bundle.unreadable`)."""
        self.__dict__.setdefault("_skipped", {})[table] = ",".join(map(str, map(int, rowids)))

    def skipped(self, table: str) -> str:  # a condition leaving out the rows skipped
        rowids = self.__dict__.get("_skipped", {}).get(table)
        return f"{table}.rowid NOT IN ({rowids})" if rowids else "1"

    def _parse(self, what: str, key: object, parse: Callable[[], _T]) -> _T:
        """Run a row parser; a malformed field becomes a `BundleError` naming the entry."""
        try:
            return parse()
        except _Malformed as exc:
            raise BundleError(f"{self.fspath}: {_corrupt(what, key, exc)}") from None


# -- field checks: what warm writes, and nothing else, becomes a record -----------------------


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


def _matching(pattern: Pattern, what: str) -> Callable[[object], str]:
    def check(value: object) -> str:
        if isinstance(value, str) and len(value) <= MAX_NAME_CHARS and pattern.fullmatch(value):
            return value
        raise _Malformed(f"not {what}")

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


def _json_value(text: str, loads: Callable[[str], object] = json.loads) -> object:
    try:
        return loads(text)
    except (ValueError, RecursionError) as exc:
        raise _Malformed(f"not JSON ({type(exc).__name__})") from None


def _json_object(text: str, loads: Callable[[str], object] = json.loads) -> dict[str, object]:
    value = _json_value(text, loads)
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
_key_id = _matching(Pattern(r"[0-9a-f]{16}"), "a key id")
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
    ("components", lambda v: _json_object(_text(v), flat_loads)),  # (its objects: bounded)
    ("compile_log", _text),
    ("seconds", _seconds),
    ("size", _size),
)


def held_alike(conn: sqlite3.Connection, sql: str, params: tuple[object, ...]) -> bool:
    """Whether a writer's `SELECT 1` comparing the stored row with the one it writes finds
    it, no value over `MAX_VALUE_BYTES` loaded to compare (SQLite refuses it: not alike)."""
    before = conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
    try:
        return conn.execute(sql, params).fetchone() is not None
    except sqlite3.DataError:  # a hostile value: replaced, never loaded
        return False
    finally:
        conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, before)


def _usage_row(row: tuple[object, ...]) -> tuple[str, tuple[float, float]]:
    key, created, last_used = row
    times = _named("created", _seconds, created), _named("last_used", _seconds, last_used)
    return _named("key", _hex64, key), times


def _within_limits(row: tuple[object, ...]) -> tuple[object, ...]:
    """A row of `_bounded_select` without its last column, which must name no oversized field."""
    if row[-1] is not None:
        field, _, length = str(row[-1]).rpartition(" ")
        raise _Malformed(f"{field}: {length} characters, over the limit")
    return row[:-1]
