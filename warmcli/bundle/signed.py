"""A bundle's signed rows and stored signatures: what `warmcli.bundle.signing` reads,
checks and stores.

`SignedRows` is a mixin `Bundle` inherits (through `BundleAdmin`): every signed row's
hash, streamed one at a time (`SIGNED_ROWS`: a tune's key, checksum and status as
text whichever way a format stores them, and its interned kernel keys with it, see
`warmcli.bundle.tune_row.signed_values`, so a migration never unsigns an entry, though
it changes the manifest's format version, which leaves the signature stale), each value
read only within its limit, as listings read it (`_HASHED`: a row holding a longer one is
never hashed, but named as corrupt; `key_select` reads a row's key alone); the
stored signatures, read and type-checked but never verified here (signing does
that), at most `SIGNATURES` of them (more is refused), lists of `MAX_BLOB_BYTES`
all together, shortest first (a list past that is read as none: its signature is invalid;
no longer list, an attacker's whatever its key id, pushes a shorter one past it), and each
key id, date, public key and signature only within its bound (`MAX_NAME_CHARS`, `KEY_BYTES`:
a longer one is read as none, a corrupt signature entry; so is a blob stored as text, or a
text SQL cannot vouch is ASCII: never decoded), so no
bundle sets the memory they cost (`_few` reads any such bounded table); a new
signature stored in one write transaction (an interrupt once it is made held until it is
committed and handed back, `held_interrupts`); which rows an open `Bundle` serves under
trusted keys (`_serves`, `refused`: only those its `covered` holds); which tunes a
production write-back writes (`unsigned_rows`: never over a row a signature lists).
Its state is `Bundle`'s, kept on it: the rows `covered` (judged by `_trusted`, the keys it
was opened under), the keys found `refused`, and whether a forked child found another file at
the path (`_other_file`, `_moved`: what was kept of its parent's file is forgotten and
`covered` judged again for that file), and the file as its last read found it (`_stamp`: one
rewritten in place since, by no SQLite writer, is opened anew, `_rewritten`). It never prints.
"""

from __future__ import annotations

import _sqlite3 as sqlite3  # as `warmcli.bundle.file`
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack
from typing import TYPE_CHECKING, Any

from warmcli.bundle.file import _open_connection, _retrying
from warmcli.bundle.rows import (
    _PROCESS,
    KERNEL_COLUMNS,
    KERNEL_SELECT,
    KERNEL_WIDTH,
    MAX_BLOB_BYTES,
    MAX_NAME_CHARS,
    MAX_TEXT_CHARS,
    OnError,
    RowReader,
    _bounded_select,
    _corrupt,
    _Malformed,
    _within_limits,
)
from warmcli.bundle.schema import SIGNATURES_SCHEMA
from warmcli.bundle.tune_row import KEY_HEX, TUNE_COLUMNS, TUNE_SELECT, TUNE_WIDTH, signed_values
from warmcli.errors import BundleError, SignatureError
from warmcli.interrupted import held_interrupts

if TYPE_CHECKING:
    from warmcli.bundle.signing import RowSet, StoredSignature
    from warmcli.records import TuneRecord

SIGNATURES = 64  # a bundle's signatures (one per signer key) read at most: more is refused
# A signature row's place among the lists summed shortest first, after its length: its key id,
# NULL as '' (a TEXT PRIMARY KEY stores a NULL, which compared as unknown left a row's own
# list out of its sum, so a list of any length was read).
_TIE = "coalesce({0}.key_id, '')"
# A blob column read only where SQLite holds a blob: a text (an edit's `CAST(... AS TEXT)`) is
# never decoded (`Could not decode to UTF-8`, warm's SQL said), but read as none, as a wrong type.
_BLOB = "typeof({0}) = 'blob'"
# A text column read only where SQL vouches it is ASCII, with no NUL (`length` stops there):
# one of bytes that are not UTF-8 is never decoded either, but read as none.
_ASCII = (
    "(typeof({0}) != 'text' OR length({0}) = length(CAST({0} AS BLOB)) "
    "AND NOT {0} GLOB '*[^' || char(1) || '-' || char(127) || ']*')"
)
KEY_BYTES = 256  # a public key or signature longer is not read (Ed25519's: 32 and 64 bytes)
# What a signature covers: every row, each table's columns but its times of use (a tune's
# key, checksum and status as text, whichever way the bundle stores them: `TUNE_COLUMNS`).
SIGNED_ROWS = (
    ("manifest", "SELECT key, value FROM manifest WHERE key IS NOT 'updated'"),
    ("fingerprints", "SELECT identity, kind, data FROM fingerprints"),
    ("blobs", "SELECT sha256, size FROM blobs"),
    ("kernels", f"SELECT {KERNEL_COLUMNS} FROM kernels"),
    ("tunes", f"SELECT {TUNE_COLUMNS} FROM tunes"),
)
_KEYS = {"manifest": "key", "fingerprints": "identity", "blobs": "sha256", "kernels": "key"}
_FINGERPRINT = ("identity", "kind", "data")
_TEXT = MAX_TEXT_CHARS  # a metadata value longer is not what warm writes: never hashed
# `SIGNED_ROWS` as `row_hashes` reads them: each value only within its limit (a kernel's
# and a tune's, those of their listings), then a column naming the first over it (NULL when
# none), and how many columns are signed (those that lead).
_HASHED = (
    ("manifest", _bounded_select((("key", _TEXT), ("value", _TEXT)), "manifest"), 2),
    ("fingerprints", _bounded_select(tuple((c, _TEXT) for c in _FINGERPRINT), "fingerprints"), 3),
    ("blobs", _bounded_select((("sha256", _TEXT), ("size", None)), "blobs"), 2),
    ("kernels", KERNEL_SELECT, KERNEL_WIDTH),
    ("tunes", TUNE_SELECT, TUNE_WIDTH),
)
_SIGNED = {"manifest": "key IS NOT 'updated'"}  # SQL: which of a table's rows are signed
_WHAT = {"kernels": "kernel", "tunes": "tune", "fingerprints": "fingerprint", "blobs": "blob"}


def key_select(table: str, select: str) -> str:
    """`select`, a select of `SIGNED_ROWS` (with its condition), as one of its rows' keys
    alone, in the order `row_hashes` reads them (no other value is read)."""
    key = _KEYS.get(table, KEY_HEX)  # a tune's, as hex whichever way it is stored
    return f"SELECT {key} {select[select.index(' FROM ') + 1 :]} ORDER BY {table}.rowid"


class SignedRows(RowReader):
    """The signed rows and signatures of an open bundle; see the module doc."""

    if TYPE_CHECKING:  # what `Bundle` provides (see there)
        transaction: Callable[[], AbstractContextManager[sqlite3.Connection]]
        covered: RowSet | None
        _refused: set[str]
        _resume: dict[tuple[str, str, int], int]

    _trusted: Sequence[bytes] | None = None  # the keys `covered` was judged by (`Bundle`'s)
    _other = False  # another file read than first opened (`_other_file`)
    _stamp: tuple[tuple[int, int, int], bytes] | None = None  # the file, as last read

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

    def _settle(self) -> None:
        super()._settle()
        self._rewritten() if not self.writable else None

    def _rewritten(self) -> None:
        """Before a read transaction of a read-only connection: the very file it opened,
        rewritten since its last read by no SQLite writer (`cp NEW PATH`, `cat NEW > PATH`:
        modified, its header's change counter and page count as they were), is opened anew,
        as a forked child opens another file (`_other_file`). SQLite compares those header
        fields alone: alike (two bundles of as many commits and pages), it would go on reading
        the pages it cached of the old content among the new, `database disk image is
        malformed` for every row not read yet, for the rest of the process. One copied
        halfway, not a bundle yet, is read as it is (a miss) and tried again at the next read;
        another file put at the path (a rename) is not read: the one opened is."""
        try:
            st = os.stat(self._real)
            if (st.st_dev, st.st_ino) != self._ident:
                return
            stamp = (st.st_mtime_ns, st.st_ctime_ns, st.st_size)
            if self._stamp is not None and self._stamp[0] == stamp:
                return
            with open(self._real, "rb") as file:  # (a regular file: `_open_connection` said so)
                header = file.read(40)[24:]
        except OSError:  # removed, or unreadable now: SQLite reads the file it has open
            return
        kept, self._stamp = self._stamp, (stamp, header)
        if kept is None or kept[1] != header:  # a first read, or an SQLite writer's commit
            return
        try:
            conn, ident = _open_connection(self.fspath, False)
        except (OSError, BundleError):  # (removed, unreadable meanwhile: alike)
            self._stamp = kept  # not a bundle (yet): tried again at the next read
            return
        old, self._conn, self._ident = self._connection, conn, ident
        old.close()
        self._other_file()

    def _other_file(self) -> None:
        """In a forked child, the path names another file than its parent opened (a bundle
        `mv`, `warm pull` or `warm merge` put there since), or the file opened was rewritten
        in place (`_rewritten`): that one is read, so what was kept of the other by id or
        rowid is forgotten, and the rows served under trusted keys are those they signed of
        this file (none, where they signed none); the kernel rows prefetched before are read
        again (`Bundle.kernel`)."""
        self._forget_kernel_keys()
        with self._lock:
            self._other = True
            self._resume.clear()
            self._refused.clear()
            if self._trusted is None:
                return
            from warmcli.bundle.signing import RowSet, covered

            try:
                self.covered = covered(self, self._trusted)
            except SignatureError:  # nothing of it is served: each read a miss, `unsigned`
                self.covered = RowSet()

    def _moved(self) -> bool:
        """Whether this process reads another file than its parent's (`_other_file`): a
        forked child's first read opens its own connection first, to know."""
        if self._pid != _PROCESS[0]:
            with self._lock:
                self._conn  # noqa: B018 (opened here: `_other_file` if another file)
        return self._other

    def refused(self, key: str) -> bool:
        """Whether the bundle holds `key` but no trusted key signed that row."""
        with self._lock:
            return key in self._refused

    def row_hashes(self, on_error: OnError | None = None) -> Iterator[tuple[str, str, bytes]]:
        """(table, the row's key, its `row_hash`) of every signed row, read one at a time (a
        tune's as `signed_values` says), each value only within its limit: a row holding a
        value over it is never hashed, but a `BundleError` naming it, or, with `on_error`,
        passed to it (its key and the problem) and left out. Rows `skip_rows` names are left
        out; a value longer than warm reads at all, a `BundleError` naming its entry."""
        from warmcli.bundle.oversize import refused
        from warmcli.bundle.signing import row_hash

        for table, select, width in _HASHED:
            select += f" WHERE {_SIGNED.get(table, '1')} AND {self.skipped(table)}"
            select += f" ORDER BY {table}.rowid"
            try:
                with self._reading():
                    cursor = _retrying(self.path, lambda s=select: self._conn.execute(s))
                    for row in cursor:
                        key = str(row[0])[:MAX_NAME_CHARS]
                        try:  # a value over its limit: not what warm writes, never hashed
                            signed = _within_limits(row)[:width]
                        except _Malformed as exc:
                            problem = _corrupt(_WHAT.get(table, table), row[0], exc)
                            if on_error is None:
                                raise BundleError(f"{self.path}: {problem}") from None
                            on_error(key, problem)
                            continue
                        if table == "tunes":
                            signed = signed_values(signed, self._kernel_key)
                        yield table, key, row_hash(table, signed)
            except BundleError as exc:
                raise refused(self, exc) from None

    def signatures(
        self, keys: Sequence[bytes] | None = None, on_error: OnError | None = None
    ) -> list[StoredSignature]:
        """The signatures the bundle stores (those of `keys`, raw public keys, if given),
        read and type-checked but not verified. A malformed row is a `BundleError`, or,
        with `on_error`, passed to it and left out."""
        from warmcli.bundle.signing import StoredSignature

        if self._one("SELECT 1 FROM sqlite_master WHERE name = 'signatures'") is None:
            return []  # a bundle made before signatures existed
        among = "" if keys is None else f"WHERE public_key IN ({', '.join('?' * len(keys))}) "
        those = f"{among}ORDER BY key_id LIMIT {SIGNATURES + 1}"  # the rows read, at most
        # Each column read within its bound; a list only while the lists up to it, shortest
        # first, all together stay within theirs (summed by a subquery of the lengths of the
        # rows read alone: a window function would hold every selected value, oversized or
        # not, in memory). Shortest first: a long list, whatever its key id, never pushes a
        # shorter one past the limit; a NULL key id ties as '' (`_TIE`), never as unknown.
        ahead = f"(t.n, {_TIE.format('t')}) <= (length(s.rows), {_TIE.format('s')})"
        blob, plain = _BLOB.format, _ASCII.format
        rows = self._few(  # lists past the size limit, all together, are never read (invalid)
            f"SELECT CASE WHEN length(key_id) <= {MAX_NAME_CHARS} AND {plain('key_id')} "
            f"THEN key_id END, "
            f"CASE WHEN {blob('public_key')} AND length(public_key) <= {KEY_BYTES} "
            f"THEN public_key END, CASE WHEN {blob('signature')} AND length(signature) <= "
            f"{KEY_BYTES} THEN signature END, CASE WHEN length(signed_at) <= "
            f"{MAX_NAME_CHARS} AND {plain('signed_at')} THEN signed_at END, "
            f"CASE WHEN {blob('rows')} AND (SELECT "
            f"sum(t.n) FROM (SELECT length(rows) AS n, key_id FROM signatures {those}) AS t "
            f"WHERE {ahead}) <= ? THEN rows END FROM signatures AS s {those}",
            SIGNATURES,  # one per signer: never read (nor checked) by the thousand
            "signatures",
            (*(keys or ()), MAX_BLOB_BYTES, *(keys or ())),
        )
        parse = StoredSignature.from_row
        if on_error is None:
            return [self._parse("signature", r[0], lambda r=r: parse(r)) for r in rows]
        found = []
        for row in rows:
            try:
                found.append(parse(row))
            except _Malformed as exc:
                on_error(str(row[0])[:MAX_NAME_CHARS], _corrupt("signature", row[0], exc))
        return found

    def _few(
        self, select: str, most: int, what: str, params: tuple[object, ...] = ()
    ) -> list[tuple[Any, ...]]:
        """The rows of `select` (which reads `most` + 1 at most); more is a corrupt bundle."""
        rows = self._all(select, params)
        if len(rows) > most:
            raise BundleError(f"{self.path}: corrupt {what} (more than {most} rows)")
        return rows

    def sign(
        self,
        make: Callable[[Iterator[tuple[str, str, bytes]]], StoredSignature],
        stored: list[StoredSignature] | None = None,
    ) -> StoredSignature:
        """Store `make(row_hashes)`, made and stored in one write transaction (replacing
        the same key's earlier signature), and append it to `stored` once committed: an
        interrupt once it is made is held (`held_interrupts`) until it is committed and in
        `stored`, or neither (the caller reads `stored` to say what was kept)."""
        stored = [] if stored is None else stored
        with ExitStack() as holding, self.transaction() as conn:
            signature = make(self.row_hashes())
            holding.enter_context(held_interrupts())  # committed and recorded, or neither
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
            # run once the transaction's exit committed it (a stack's exits run in reverse)
            holding.push(lambda failed, *_: None if failed else stored.append(signature))
        return signature

    def unsigned_rows(self, tunes: Iterable[TuneRecord]) -> list[TuneRecord]:
        """Those of `tunes` whose key's stored row no stored signature lists, whoever's key
        made it (not verified here): a production write-back writes only these, leaving a
        signed row as it was (`Bundle.keeps_signed`). A row that cannot be hashed is not
        signed."""
        from warmcli.bundle.signing import RowSet, row_hash
        from warmcli.bundle.tune_row import BY_KEY, key_param

        tunes = list(tunes)
        lists = [s.rows for s in self.signatures(on_error=lambda _key, _why: None)]
        rows, left = RowSet(lists), []
        for tune in tunes if lists else ():
            row = self._one(f"{TUNE_SELECT} WHERE {BY_KEY}", key_param(tune.key))
            try:
                values = _within_limits(row)[:TUNE_WIDTH] if row else None
                signed = values and row_hash("tunes", signed_values(values, self._kernel_key))
            except (_Malformed, BundleError):  # a row never hashed: not signed
                signed = None
            if signed not in rows:
                left.append(tune)
        return left if lists else tunes

    def format_version(self) -> int:
        """The open file's format (its header's `user_version`: format 1 read-only stays 1)."""
        row = self._one("PRAGMA user_version")
        return int(row[0]) if row else 0

    def holds_entries(self) -> bool:
        row = self._one("SELECT EXISTS (SELECT 1 FROM kernels) OR EXISTS (SELECT 1 FROM tunes)")
        return bool(row and row[0])
