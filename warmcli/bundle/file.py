"""The bundle file: warm's schema, opening, validating and locking one SQLite file.

Schema (`warmcli.bundle.schema`, versioned by `PRAGMA user_version`, marked as warm's by `PRAGMA
application_id`): `manifest` (format and warm versions, created/updated times, its run),
`fingerprints` (every toolchain and device that wrote entries), `blobs` (binaries by sha256:
kernels compiled in one batch share one), `kernels` (key, device, arch, entry, symbol, blob sha256,
compile log, seconds), `tunes` (tune key, pick, every candidate's measurement, packed by
`warmcli.bundle.candidates`, with their kernel keys once in `tune_kernels`; an older format is read
as it is, and migrated by `warmcli.bundle.migrate` when first opened for write) and `signatures`
(Ed25519 signatures of the rows their signers vouch for, see `warmcli.bundle.signing`; a bundle
made before it existed has no such table and opens as unsigned). A bundle is untrusted input:
`read_header` and `check_header` read its SQLite header without SQL; `_open_connection` checks that
its schema is exactly warm's (`sqlite_master` equal to the rows warm's schema declares,
`warmcli.bundle.schema.declared_schema`, else compared row by row with what SQLite makes of it by
`schema_problems`, so no trigger, view, extra index or generated column of a bundle ever runs; till
it passes, SQLite reads no value of it past `SCHEMA_BYTES`, nor more than `SCHEMA_CALLS` times
`SCHEMA_STEPS` steps to load it), with `trusted_schema` off (a journal warm rolls back, `recover`,
has the schema it restores checked again) and SQLite's own page cache (`OWN_CACHE`, never one the
file's header asks for), and every SQLite failure becomes a one-line `BundleError`
(`_sqlite_errors`; a full disk or another write the system refused is named so: rolled back). The
file stays in rollback-journal mode (a file switched to WAL is switched back on open, or refused
where it cannot be written or its `-wal` or `-shm` is a link, `journal.check_wal_files`, even with
no WAL header: SQLite opens them), so a read-only copy opens, and a write a crash interrupted is
rolled back by the next open, or read of a process that had it open. "Database is locked" is waited
for `LOCK_WAIT_SECONDS` at most, a slice at a time (`warmcli.bundle.waiting`: a signal stops the
wait), then a one-line `BundleLocked` (`_retrying`, which rolls back that crash too). Writers take
a file lock (`warmcli.bundle.lock`, which readers never take); `journal.remove_leftovers` removes,
under it, the temporary files, journals and locks a killed create or merge left beside the bundle.
State: warm's schemas (read once) and `_lock` (held around an open or a create: a fork waits for
it; a child forked while another thread read past that wait opens none, `forking.sqlite_unsafe`);
reads no kernel, tune, blob.
"""

from __future__ import annotations

import _sqlite3 as sqlite3  # the C module `sqlite3` wraps: no dbapi2 (~0.4 ms) at import
import contextlib
import functools
import itertools as it
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from warmcli.bundle import journal as journals
from warmcli.bundle import schema as schemas
from warmcli.bundle.journal import check_journal, check_wal_files, is_hot, may_write
from warmcli.bundle.schema import FORMAT_VERSION, SCHEMAS, declared_schema, schema_problems
from warmcli.bundle.temp_file import made_exclusively, still_made
from warmcli.bundle.waiting import SLICE_SECONDS, Waiting, busy
from warmcli.config import sqlite_temp_dir as temp_dir  # (SQLite's: a full disk's which?)
from warmcli.errors import CANNOT_WRITE, FORKED_READING, WRITE_FAILED, BundleError, BundleLocked
from warmcli.forking import new_rlock, sqlite_unsafe
from warmcli.printable import printable

if TYPE_CHECKING:  # a path: a `str`, or a `Path` its caller made (pathlib is not imported here)
    from pathlib import Path

APPLICATION_ID = 0x5741524D  # "WARM"
SQLITE_MAGIC = b"SQLite format 3\x00"
SQLITE_HEADER_BYTES = 100
WAL_FORMAT = 2  # the header's file format bytes in write-ahead-log mode (1: rollback journal)
OWN_CACHE = "PRAGMA cache_size = -2000"  # SQLite's default (2,000 KiB), whatever the file says
LOCK_WAIT_SECONDS = 60.0  # the most an operation waits for another's SQLite lock (as a write-back)
_WRITES = (778, 1034, 1290, 1546, 2570)  # SQLITE_IOERR_ WRITE FSYNC DIR_FSYNC TRUNCATE DELETE
PAGE_BYTES = 16384
# SQLite holds each entry it loads parsed (a sum: ~40 bytes a byte), so warm's own, any format's:
SCHEMA_BYTES = 1 << 11  # the most SQLite reads of a value of a schema not checked (warm's: 389)
SCHEMA_STEPS, SCHEMA_CALLS = 50, 20  # the steps of a load (~1,000; warm's: 221)
_lock = new_rlock(sys.modules[__name__], held=True)  # around an open: a fork waits for it
_T = TypeVar("_T")
_URI_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~/")
# a hostile schema's text is cut, never read whole
SCHEMA_SELECT = "SELECT type, name, tbl_name, substr(sql, 1, 4096) FROM sqlite_master"


@functools.cache
def warm_schema(script: str) -> frozenset[tuple[object, ...]]:
    """The `sqlite_master` rows `script` creates: a bundle holds these, no other."""
    conn = sqlite3.connect(":memory:")
    try:
        conn.executescript(script)
        return frozenset(conn.execute(SCHEMA_SELECT).fetchall())
    finally:
        conn.close()


def read_start(path: str | os.PathLike[str], size: int) -> bytes | None:
    """The first `size` bytes of the regular file at `path`; None where it is none (a FIFO, a
    device, a folder: judged by `stat`, never opened, as opening a device acts: a terminal
    becomes a session leader's); one swapped in since is never waited on nor a terminal."""
    if not stat.S_ISREG(os.stat(path).st_mode):
        return None
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return os.read(fd, size)  # a regular file's read is whole, up to its end
    finally:
        os.close(fd)


def read_header(path: str | Path) -> tuple[int, int, bool]:
    """The file's SQLite header, checked: its `(application_id, user_version, wal)`;
    `FileNotFoundError` if there is no file, `BundleError` if it is no regular file (a
    FIFO, a device, a folder: never opened by SQLite, never waited on).

    The first two are header fields (at offsets 68 and 60, big-endian), read here without
    SQL; warm never changes them after a bundle is created. `wal` is whether the file
    format bytes (18 and 19) say write-ahead-log mode, which warm never sets.
    """
    try:
        head = read_start(path, SQLITE_HEADER_BYTES)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise BundleError(f"{path}: cannot read bundle: {exc.strerror}") from None
    if head is None:
        raise BundleError(f"{path}: not a warm bundle (not a regular file)")
    if not head:
        raise BundleError(f"{path}: not a warm bundle (an empty file)")
    if head[: len(SQLITE_MAGIC)] != SQLITE_MAGIC:
        raise BundleError(f"{path}: not a warm bundle (not an SQLite file)")
    if len(head) < SQLITE_HEADER_BYTES:
        raise BundleError(f"{path}: corrupt bundle (its SQLite header is cut short)")
    field = functools.partial(int.from_bytes, byteorder="big", signed=True)
    return field(head[68:72]), field(head[60:64]), WAL_FORMAT in (head[18], head[19])


def check_header(path: str | Path, missing: type[BundleError] | None = None) -> tuple[int, bool]:
    """The format version and WAL flag of the warm bundle at `path`, from its header alone;
    `BundleError` if it is no SQLite file or another application's; if there is none,
    `missing`'s `no such bundle` where given, else `FileNotFoundError` (a loop of links: said)."""
    try:
        app, version, wal = read_header(path)
    except FileNotFoundError as exc:
        raise missing(f"{path}: no such bundle") if missing else exc from None
    if app != APPLICATION_ID:
        raise BundleError(f"{path}: not a warm bundle (an SQLite file of another application)")
    return version, wal


def _connect(target: str | Path, *, uri: bool = False) -> sqlite3.Connection:
    # One connection per open bundle, shared by the process's threads (`Bundle` locks it).
    conn: Waiting = sqlite3.connect(
        target,
        uri=uri,
        timeout=SLICE_SECONDS,  # SQLite's wait for a lock, a slice at a time (a signal stops it)
        isolation_level=None,
        check_same_thread=False,
        factory=Waiting,
    )
    conn.wait_seconds = LOCK_WAIT_SECONDS  # in all, for each statement
    # Till `_validate` passes its schema, SQLite reads no value of it past `SCHEMA_BYTES`: its
    # own load of a bundle's 200 MB statement held it whole (231 MB peak; refused so: 11 MB).
    conn.whole = conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, SCHEMA_BYTES)
    # nor loads one of entries by the thousand (200,000 took SQLite 73 s: refused so, 8 ms), by a
    conn.steps = it.repeat(False, SCHEMA_CALLS)  # C handler (a Ctrl-C in a Python one was lost)
    conn.set_progress_handler(functools.partial(next, conn.steps, True), SCHEMA_STEPS)
    # An untrusted schema: SQL functions with side effects never run from it, and SQLite's
    # defensive mode (where exposed) forbids writing the schema or pages.
    conn.execute("PRAGMA trusted_schema = OFF")
    defensive = getattr(sqlite3, "SQLITE_DBCONFIG_DEFENSIVE", None)
    if defensive is not None and hasattr(conn, "setconfig"):
        conn.setconfig(defensive, True)
    return conn


def _read_only_uri(path: str | Path) -> str:
    """`file:` URI of `path` (`link/..` not collapsed), read-only: its bytes (a name need not
    be UTF-8) as `urllib.parse.quote` encodes them, an empty authority (a path may start `//`)."""
    raw = os.fsencode(path if os.path.isabs(path) else os.path.join(os.getcwd(), path))
    return f"file://{''.join(chr(b) if b in _URI_SAFE else f'%{b:02X}' for b in raw)}?mode=ro"


def recover(path: str | Path, judged: bool = False) -> None:
    """Roll back a write a crash interrupted, so a read-only open sees the state before it.

    SQLite rolls a hot journal back on the first read, but only through a connection that may
    write; a read-only one fails instead. The rollback takes SQLite's own locks, never warm's
    file lock, so readers never wait for warm's writers. The journal is beside the file a
    symlinked `path` names, where SQLite keeps it (`judged`: an open that `check_journal` found
    it for; where it may not write, only one SQLite finds hot, `is_hot`)."""
    if not (judged or check_journal(path)):  # none or empty (one SQLite must not play: refused)
        return
    check_wal_files(path)  # its page 1 may say WAL: SQLite would open a `-shm` link at once
    journal = f"{os.path.basename(os.path.realpath(path))}-journal"
    problem = f"a write was interrupted ({journal} is left)"
    if not (may_write(path) or is_hot(_read_only_uri(path))):
        return  # a live writer's (SQLite reads past it): no write was interrupted
    _mend(path, problem, "roll the write back", "SELECT count(*) FROM sqlite_master")
    # What it restored is checked as an open checks it: one planted beside a bundle a
    # process has open may restore a view or trigger that no open has seen (refused).
    with _sqlite_errors(path), contextlib.closing(_connect(_read_only_uri(path), uri=True)) as c:
        _validate(path, c, check_header(path)[0])


def settle_journal(path: str | Path, sides: bool = True) -> None:
    """Before a writer's transaction (or read) on a bundle open since: a journal left or
    planted beside it since is rolled back here and what it restored checked (`recover`),
    never by SQLite, where a restored trigger would run; with `sides`, a `-wal` or `-shm`
    that is a link is refused (`check_wal_files`: the journal's page 1 may say WAL)."""
    recover(path, judged=True) if check_journal(path) else None
    check_wal_files(path) if sides else None


def rolled_back(conn: sqlite3.Connection) -> None:
    """After a writer's transaction (or VACUUM) failed: rolled back, and a journal SQLite left
    hot in its error state (a write the disk refused: the file grown, the journal beside it)
    played back now, by a read on the same connection under the writer's lock, never left
    for the next open; a playback refused too (the disk) leaves it to that open, as before."""
    conn.execute("ROLLBACK") if conn.in_transaction else None
    with contextlib.suppress(sqlite3.Error):
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()


def _mend(path: str | Path, problem: str, remedy: str, sql: str) -> tuple[Any, ...] | None:
    """Run `sql` once through a connection that may write (what a read-only open cannot
    mend); refused, naming `problem`, where the file (or its folder, where SQLite's journal
    goes: that of the file a symlink names) cannot be written."""
    if not may_write(path):
        raise BundleError(
            f"{path}: {problem}; open the bundle once where it is writable to {remedy}"
        )
    with _lock, _sqlite_errors(path), contextlib.closing(_connect(path)) as conn:  # (also alone)
        return _retrying(path, lambda: conn.execute(sql).fetchone())


def _leave_wal(path: str | Path) -> None:
    """Switch a bundle whose header says write-ahead-log mode back to a rollback journal
    (what warm writes, so a read-only copy opens); refused where the file cannot be written.
    The switch checkpoints any `-wal` into the bundle, checked with the rest at the open."""
    problem = "the bundle is in WAL mode, which warm does not read"
    check_wal_files(path)  # a `-shm` hard-linked to another file would be rewritten
    row = _mend(path, problem, "switch it back", "PRAGMA journal_mode = DELETE")
    if row is None or str(row[0]).lower() != "delete":
        raise BundleError(f"{path}: the bundle is in WAL mode and could not be switched back")


def _retrying(path: str | Path, op: Callable[[], _T]) -> _T:
    """Run one SQLite operation; "database is locked" (waited for `LOCK_WAIT_SECONDS` by the
    connection, `Waiting`) raised as `BundleLocked`; and once a hot journal a read-only
    connection cannot roll back (a writer killed mid-write since it opened: every later
    read failed), rolled back by `recover` as an open does."""
    mended = False
    while True:
        try:
            return op()
        except sqlite3.Error as exc:
            hot = getattr(exc, "sqlite_errorcode", 0) == sqlite3.SQLITE_READONLY_ROLLBACK
            if hot and not mended:  # (no live writer holds a hot journal: none waited for)
                recover(path)  # (a journal gone meanwhile: nothing to do; refused: one line)
                mended = True
                continue
            if not busy(exc):
                raise
            held = f"locked by another process for {LOCK_WAIT_SECONDS:g} s ({exc})"
            raise BundleLocked(f"{path}: {held}: a writer stopped mid-write?") from None


@contextlib.contextmanager
def _sqlite_errors(path: str | Path) -> Iterator[None]:
    """Every SQLite failure, as a one-line `BundleError` (its words escaped); a write the
    system refused (a full disk, a size limit) says so: rolled back, never "corrupt"; nor
    is a file SQLite could not open (no descriptor left, `ulimit -n`; a folder that takes no
    journal: `cannot_open`)."""
    try:
        yield
    except (sqlite3.Error, UnicodeDecodeError) as exc:  # SQLite's own words may be no UTF-8
        try:
            from warmcli.bundle.disk_full import cannot_open, disk_full  # (a failure's words)
        except OSError:  # its module unread: no descriptor left (`ulimit -n`), said so
            raise BundleError(f"{path}: {journals.CANNOT_OPEN} ({printable(exc)})") from None

        if isinstance(exc, UnicodeDecodeError):  # (they quote a corrupt schema's names)
            exc = sqlite3.DatabaseError(bytes(exc.object).decode("utf-8", "replace"))
        code = getattr(exc, "sqlite_errorcode", None) or (13 if "disk is full" in str(exc) else 0)
        why = WRITE_FAILED if code in _WRITES else disk_full(path, temp_dir) if code == 13 else ""
        if why:
            raise BundleError(f"{path}: {why}: {journals.after_refused_write(path)}") from None
        closed = isinstance(exc, sqlite3.ProgrammingError) and "closed" in str(exc)  # let go
        what = CANNOT_WRITE if "readonly" in str(exc) else "corrupt bundle"
        what += ": its folder is not writable (for its journal)" if code == 1544 else ""
        what = cannot_open(path) if code & 0xFF == sqlite3.SQLITE_CANTOPEN else what
        what = "closed" if closed else what  # by use_bundle() or close(), and used since
        if isinstance(exc, sqlite3.DataError) and "too big" in str(exc):
            what += ": a row holds a value longer than warm reads (not read)"
        raise BundleError(f"{path}: {what} ({printable(exc)})") from None  # it may quote a row


def _open_connection(
    path: str | Path, write: bool, locked: bool = False, again: bool = True
) -> tuple[sqlite3.Connection, tuple[int, int]]:
    """A checked connection to the bundle at `path` (`FileNotFoundError` if there is none)
    and the (device, inode) of the file it opened; an older format opened for write is
    migrated under the write lock, as any write (a merge never removes its live journal)."""
    if sqlite_unsafe():
        raise BundleLocked(f"{path}: {FORKED_READING}")
    version, wal = check_header(path)
    if write and not locked and version != FORMAT_VERSION and version in SCHEMAS:
        from warmcli.bundle.lock import write_lock  # only an old bundle's writer

        with write_lock(path):  # the file opened is the one the lock's holders replace
            return _open_connection(path, write, True, again)
    journal = check_journal(path)  # before SQLite plays one: one warm never writes is refused
    check_wal_files(path, if_wal_found=True)  # SQLite opens one found, WAL header or not
    with _lock, _sqlite_errors(path):
        if wal:
            _leave_wal(path)
        st = os.stat(path)  # before connecting: a file replaced meanwhile is seen at a write
        if journal and not write:  # (a writer's connection rolls it back itself)
            recover(path, judged=True)
        conn = _connect(path) if write else _connect(_read_only_uri(path), uri=True)
        try:
            _validate(path, conn, version)
            if write and version != FORMAT_VERSION:
                from warmcli.bundle.migrate import migrate  # only an old bundle's writer

                _retrying(path, lambda: migrate(conn, FORMAT_VERSION, schemas.TUNES_SCHEMA))
                _validate(path, conn, FORMAT_VERSION)
        except BaseException as exc:
            conn.close()  # its header read before another's migration, or a rollback's:
            if again and isinstance(exc, BundleError) and check_header(path)[0] != version:
                return _open_connection(path, write, locked, again=False)  # as it is now
            raise
    return conn, (st.st_dev, st.st_ino)


def _validate(path: str | Path, conn: sqlite3.Connection, version: int) -> None:
    """Refuse a bundle whose schema is not exactly warm's for its format (`BundleError`);
    then lift `_connect`'s bounds, on a value's length and the steps (`unbounded`)."""
    try:
        _check_schema(path, conn, version)
    except sqlite3.DataError:  # SQLite's load refused an entry over `SCHEMA_BYTES`
        raise BundleError(f"{path}: refused: its schema is not warm's (an entry over "
                          f"{SCHEMA_BYTES} bytes)") from None  # fmt: skip
    except sqlite3.OperationalError as exc:  # "interrupted": by `_connect`'s handler, or else
        if conn.steps.__length_hint__() or "interrupt" not in str(exc):  # (calls left)
            raise
        raise BundleError(f"{path}: refused: its schema is not warm's (not loaded in "
                          f"{SCHEMA_CALLS * SCHEMA_STEPS} steps)") from None  # fmt: skip
    unbounded(conn)


def unbounded(conn: sqlite3.Connection) -> None:
    """Lift `_connect`'s bounds on SQLite's load of a schema: it is warm's (`_validate`)."""
    conn.set_progress_handler(None, 0)
    conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, getattr(conn, "whole", SCHEMA_BYTES))


def _check_schema(path: str | Path, conn: sqlite3.Connection, version: int) -> None:
    if version not in SCHEMAS:
        newer = version > max(SCHEMAS)  # (an older one than warm has read: no warm bundle)
        raise BundleError(
            f"{path}: bundle format version {version}, this warm reads formats "
            f"{', '.join(map(str, sorted(SCHEMAS)))}"
            + (": a newer warm wrote it: upgrade warm to read it" if newer else "")
        )
    schema, base = SCHEMAS[version]
    select = f"{SCHEMA_SELECT} LIMIT {len(declared_schema(schema)) + 8}"
    rows = _retrying(path, lambda: conn.execute(select).fetchall())
    conn.execute(OWN_CACHE)  # SQLite takes a header's (2e9 pages: all read kept); no I/O here
    if frozenset(rows) in (declared_schema(schema), declared_schema(base)):
        return  # exactly warm's schema (or, made before signatures existed, its base)
    expected = warm_schema(schema)
    problems = schema_problems(rows, expected)
    if problems and not schema_problems(rows, warm_schema(base)):
        problems = []  # a bundle made before signatures existed: it opens as unsigned
    if problems:  # a trigger, a view, a generated column... could run or change anything
        more = f"; and {len(problems) - 3} more" if len(problems) > 3 else ""
        raise BundleError(
            f"{path}: refused: its schema is not warm's ({'; '.join(problems[:3])}{more})"
        )


def _write_empty(tmp: Path) -> os.stat_result:
    """A new, empty bundle at `tmp` (made here, `made_exclusively`), 0664 less the umask: warm's
    schema, ids and manifest in one unsynced transaction, once `still_made` saw SQLite open it."""
    from warmcli._version import __version__  # a writer's: never a serving process's

    now, made = repr(time.time()), made_exclusively(tmp)  # a link or file there: refused
    manifest = [("format_version", str(FORMAT_VERSION)), ("warm_version", __version__)]
    manifest += [("created", now), ("updated", now)]
    with open(made, "wb", buffering=0):  # closed whatever fails; SQLite's mutexes: `_lock`
        with _lock, contextlib.closing(sqlite3.connect(tmp, isolation_level=None)) as conn:
            still_made(tmp, st := os.fstat(made), made)  # before SQLite writes a byte
            conn.execute("PRAGMA journal_mode = DELETE")
            conn.execute("PRAGMA synchronous = OFF")
            conn.execute(f"PRAGMA page_size = {PAGE_BYTES}")  # small blobs share pages
            conn.execute("BEGIN")
            for statement in schemas.statements(schemas.SCHEMA):
                conn.execute(statement)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {FORMAT_VERSION}")
            conn.executemany("INSERT INTO manifest VALUES (?, ?)", manifest)
            conn.execute("COMMIT")
        os.fsync(made)  # the file made here, whatever `tmp` names now
    return st
