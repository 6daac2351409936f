"""The environment bundle: one SQLite file holding every compiled kernel and every tune pick.

Schema (versioned by `PRAGMA user_version`, marked as warm's by `PRAGMA
application_id`): `manifest` (format and warm versions, created/updated times),
`fingerprints` (every toolchain and device that wrote entries), `blobs` (binaries
by sha256: kernels compiled in one batch share one), `kernels` (key, device,
arch, entry, symbol, blob sha256, compile log, seconds) and `tunes` (tune key,
pick, every candidate's measurement). A bundle is untrusted input: it is read
with plain SQL, never unpickled or evaluated, and a blob whose sha256 does not
match is never served. Opening reads the manifest only; kernels, tunes and blobs
are read on demand. Writers take a file lock and write each batch in one
transaction; the file stays in rollback-journal mode, so a read-only copy opens.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock

from warmcli._version import __version__
from warmcli.records import KernelRecord, TuneRecord

FORMAT_VERSION = 1
APPLICATION_ID = 0x5741524D  # "WARM"
SQLITE_MAGIC = b"SQLite format 3\x00"
BUSY_TIMEOUT_MS = 60_000

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
TABLES = {"manifest", "fingerprints", "blobs", "kernels", "tunes"}
KERNEL_COLUMNS = (
    "key, device, backend, arch, entry, label, symbol, sha256, toolchain, components, "
    "compile_log, seconds"
)
TUNE_COLUMNS = (
    "key, operation, shape_key, device, checksum, status, pick, candidates, seconds, measured_at"
)


class BundleError(Exception):
    """A bundle is missing, corrupt, foreign, or of another format version."""


def _check_header(path: Path) -> None:
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except OSError as exc:
        raise BundleError(f"{path}: cannot read bundle: {exc.strerror}") from None
    if head != SQLITE_MAGIC:
        raise BundleError(f"{path}: not a warm bundle (not an SQLite file)")


class Bundle:
    """An open bundle file; see the module doc."""

    def __init__(self, path: Path, conn: sqlite3.Connection, writable: bool) -> None:
        self.path = path
        self._conn = conn
        self.writable = writable

    # -- opening ---------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, write: bool = False) -> Bundle:
        """Open an existing bundle (read-only unless `write`); `create` makes a new one."""
        path = Path(path)
        if not path.exists():
            if write:
                return cls.create(path)
            raise BundleError(f"{path}: no such bundle")
        _check_header(path)
        try:
            if write:
                conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
            else:
                conn = sqlite3.connect(
                    f"{path.resolve().as_uri()}?mode=ro",
                    uri=True,
                    timeout=BUSY_TIMEOUT_MS / 1000,
                    isolation_level=None,
                )
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            bundle = cls(path, conn, write)
            bundle._validate()
        except sqlite3.DatabaseError as exc:
            raise BundleError(f"{path}: corrupt bundle ({exc})") from None
        return bundle

    @classmethod
    def create(cls, path: str | os.PathLike[str]) -> Bundle:
        """Create a new bundle file (or open it if another process just did)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with FileLock(str(path) + ".lock"):
            if path.exists() and path.stat().st_size > 0:
                return cls.open(path, write=True)
            tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
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
            os.replace(tmp, path)
        return cls.open(path, write=True)

    def _validate(self) -> None:
        app = self._conn.execute("PRAGMA application_id").fetchone()[0]
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if app != APPLICATION_ID:
            raise BundleError(
                f"{self.path}: not a warm bundle (an SQLite file of another application)"
            )
        if version != FORMAT_VERSION:
            raise BundleError(
                f"{self.path}: bundle format version {version}, this warm reads {FORMAT_VERSION}"
            )
        names = {
            r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
        missing = TABLES - names
        if missing:
            raise BundleError(f"{self.path}: corrupt bundle (missing tables {sorted(missing)})")

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Bundle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading ---------------------------------------------------------------------------

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        try:
            yield self._conn
        except sqlite3.DatabaseError as exc:
            raise BundleError(f"{self.path}: corrupt bundle ({exc})") from None

    def manifest(self) -> dict[str, str]:
        with self._reading() as conn:
            return {k: v for k, v in conn.execute("SELECT key, value FROM manifest")}

    def fingerprints(self) -> list[dict[str, object]]:
        with self._reading() as conn:
            rows = conn.execute(
                "SELECT identity, kind, data FROM fingerprints ORDER BY kind, identity"
            )
            return [{"identity": i, "kind": k, **_json_object(d)} for i, k, d in rows]

    def kernel(self, key: str) -> KernelRecord | None:
        with self._reading() as conn:
            row = conn.execute(
                f"SELECT {KERNEL_COLUMNS}, (SELECT size FROM blobs WHERE sha256 = kernels.sha256) "
                "FROM kernels WHERE key = ?",
                (key,),
            ).fetchone()
        return None if row is None else _kernel_record(row)

    def kernels(self) -> list[KernelRecord]:
        with self._reading() as conn:
            rows = conn.execute(
                f"SELECT {KERNEL_COLUMNS}, b.size FROM kernels LEFT JOIN blobs b USING (sha256) "
                "ORDER BY device, arch, label"
            ).fetchall()
        return [_kernel_record(r) for r in rows]

    def kernels_for_entry(self, entry: str) -> list[KernelRecord]:
        """Every build of kernels with this entry name (for serving without a compiler)."""
        with self._reading() as conn:
            rows = conn.execute(
                f"SELECT {KERNEL_COLUMNS}, b.size FROM kernels LEFT JOIN blobs b USING (sha256) "
                "WHERE entry = ?",
                (entry,),
            ).fetchall()
        return [_kernel_record(r) for r in rows]

    def blob(self, sha256: str) -> bytes:
        """A binary by its sha256; raises `BundleError` if it is missing or does not match."""
        with self._reading() as conn:
            row = conn.execute("SELECT data FROM blobs WHERE sha256 = ?", (sha256,)).fetchone()
        if row is None or not isinstance(row[0], bytes):
            raise BundleError(f"{self.path}: blob {sha256[:16]} is missing")
        data = row[0]
        if hashlib.sha256(data).hexdigest() != sha256:
            raise BundleError(f"{self.path}: blob {sha256[:16]} does not match its sha256")
        return data

    def tune(self, key: str) -> TuneRecord | None:
        with self._reading() as conn:
            row = conn.execute(f"SELECT {TUNE_COLUMNS} FROM tunes WHERE key = ?", (key,)).fetchone()
        return None if row is None else _tune_record(row, self.path)

    def tunes(self) -> list[TuneRecord]:
        with self._reading() as conn:
            rows = conn.execute(
                f"SELECT {TUNE_COLUMNS} FROM tunes ORDER BY operation, shape_key"
            ).fetchall()
        return [_tune_record(r, self.path) for r in rows]

    def counts(self) -> dict[str, int]:
        with self._reading() as conn:
            return {
                t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("kernels", "blobs", "tunes")
            }

    # -- writing ---------------------------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, under the bundle's file lock (other writers wait)."""
        if not self.writable:
            raise BundleError(f"{self.path}: bundle is open read-only")
        with FileLock(str(self.path) + ".lock"):
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute(
                    "INSERT OR REPLACE INTO manifest VALUES ('updated', ?)", (repr(time.time()),)
                )
                conn.execute("COMMIT")
            except BaseException:
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
            for record, binary in kernels:
                conn.execute(
                    "INSERT OR IGNORE INTO blobs VALUES (?, ?, ?)",
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
                        record.compile_log,
                        record.seconds,
                        now,
                        now,
                    ),
                )
                n_kernels += 1
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
                n_tunes += 1
        return n_kernels, n_tunes

    # -- maintenance: usage times, removal, integrity (warm clean, merge, verify) -----------

    def usage(self) -> dict[str, tuple[float, float]]:
        """Every kernel's (created, last_used) times, by key."""
        with self._reading() as conn:
            rows = conn.execute("SELECT key, created, last_used FROM kernels")
            return {str(k): (float(c), float(u)) for k, c, u in rows}

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
        """Remove kernels and tunes, then every blob no kernel refers to; returns blobs removed."""
        with self.transaction() as conn:
            conn.executemany("DELETE FROM kernels WHERE key = ?", [(k,) for k in kernel_keys])
            conn.executemany("DELETE FROM tunes WHERE key = ?", [(k,) for k in tune_keys])
            cursor = conn.execute(
                "DELETE FROM blobs WHERE sha256 NOT IN (SELECT sha256 FROM kernels)"
            )
            return cursor.rowcount

    def vacuum(self) -> None:
        """Give freed pages back to the file system, under the bundle's lock."""
        if not self.writable:
            raise BundleError(f"{self.path}: bundle is open read-only")
        with FileLock(str(self.path) + ".lock"), self._reading() as conn:
            conn.execute("VACUUM")

    def tune_keys(self) -> list[str]:
        with self._reading() as conn:
            return [str(r[0]) for r in conn.execute("SELECT key FROM tunes ORDER BY key")]

    def blob_digests(self) -> Iterator[tuple[str, int, str]]:
        """(stored sha256, stored size, sha256 of the data) of every blob, read one at a time."""
        with self._reading() as conn:
            for sha, size, data in conn.execute("SELECT sha256, size, data FROM blobs"):
                actual = hashlib.sha256(data).hexdigest() if isinstance(data, bytes) else ""
                yield str(sha), int(size), actual

    def integrity_check(self) -> list[str]:
        """SQLite's own page-level check: [] when the file is sound."""
        with self._reading() as conn:
            rows = [str(r[0]) for r in conn.execute("PRAGMA integrity_check")]
        return [] if rows == ["ok"] else rows


def _json_object(text: str) -> dict[str, object]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _kernel_record(row: tuple[object, ...]) -> KernelRecord:
    (key, device, backend, arch, entry, label, symbol, sha, toolchain, comps, log, secs, size) = row
    return KernelRecord(
        key=str(key),
        device=str(device),
        backend=str(backend),
        arch=str(arch),
        entry=str(entry),
        label=str(label),
        symbol=str(symbol),
        sha256=str(sha),
        toolchain=str(toolchain),
        components={str(k): str(v) for k, v in _json_object(str(comps)).items()},
        compile_log=str(log),
        seconds=float(secs),
        size=int(size or 0),  # type: ignore[arg-type]
    )


def _tune_record(row: tuple[object, ...], path: Path) -> TuneRecord:
    key, operation, shape_key, device, checksum, status, pick, cands, secs, measured_at = row
    try:
        candidates = TuneRecord.parse_candidates(str(cands))
    except (ValueError, KeyError, TypeError) as exc:
        raise BundleError(f"{path}: corrupt tune entry {str(key)[:16]} ({exc})") from None
    return TuneRecord(
        key=str(key),
        operation=str(operation),
        shape_key=str(shape_key),
        device=str(device),
        checksum=str(checksum),
        status=str(status),
        pick=None if pick is None else str(pick),
        candidates=candidates,
        seconds=float(secs),
        measured_at=float(measured_at),  # type: ignore[arg-type]
    )
