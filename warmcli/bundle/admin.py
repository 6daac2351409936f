"""A bundle's maintenance and aggregates: what `warm clean/merge/verify/sign/stats` use.

`BundleAdmin` is a mixin `Bundle` (`warmcli.bundle.store`) inherits beside `BundleCore` (so
every `Bundle.x` name stays one object's): usage times, removal and vacuum, blob digests and
SQLite's own check, the manifest and fingerprints, counts and aggregates (`warm stats` on a
bundle too large to list). `integrity` streams every check `warm verify` and a remote
download make (SQLite's, the manifest, blobs, kernels, tunes: those of a large bundle in
other processes meanwhile, `warmcli.bundle.checking`); `signed_rows` counts what a
signature could cover, for a bundle none covers; `drop_corrupt` removes kernels whose blob
is missing or wrong. The runtime reaches none of this (its seam is
`warmcli.runtime.store.Store`), and a process that only serves never imports it (its
bundle is a `BundleCore`): the lock, manifest, oversize and unused-row modules are imported
where a method first needs them. This module owns no state and never prints.
"""

from __future__ import annotations

import _sqlite3 as sqlite3  # as `warmcli.bundle.file`
import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from warmcli.bundle.blobs import digest
from warmcli.bundle.file import _retrying, _sqlite_errors, rolled_back, settle_journal
from warmcli.bundle.kernel_row import _kernel_record
from warmcli.bundle.rows import (
    AS_STORED,
    KERNEL_SELECT,
    MAX_BLOB_BYTES,
    MAX_NAME_CHARS,
    OnError,
    _hex64,
    _name,
    _named,
    _usage_row,
)
from warmcli.bundle.signed import SIGNED_ROWS, SignedRows, key_select
from warmcli.bundle.tune_row import KEY_HEX, PENDING, TUNE_SELECT
from warmcli.errors import BundleError
from warmcli.printable import first_naturally, natural
from warmcli.records import KernelRecord, TuneRecord

_LIES = (  # a size no kernel row's check refuses (an integer in bounds), not the blob's length
    f"typeof(size) = 'integer' AND size BETWEEN 0 AND {MAX_BLOB_BYTES} AND size != length(data)"
)
_SIZE_LIES = (  # a blob whose size lies (but not the blob's: those are named), a kernel's first
    "SELECT sha256, size, length(data), sha256 IN (SELECT sha256 FROM kernels) FROM blobs"
    f" WHERE typeof(data) = 'blob' AND {_LIES} ORDER BY 4 DESC, rowid"
)

_BLOB_PROBLEMS = (  # `_SIZE_LIES`' rows, and those whose data no reader takes (text, a
    # number: missing to every reader), in one scan of the blobs: (sha256, size, length,
    # used, typeof(data))
    "SELECT sha256, size, length(data), sha256 IN (SELECT sha256 FROM kernels), typeof(data)"
    f" FROM blobs WHERE typeof(data) != 'blob' OR ({_LIES}) ORDER BY 4 DESC, rowid"
)

Rows = tuple[Sequence[tuple[int, bytes | None]], ...]  # (rowid, key's bytes) of kernels, tunes


class BundleAdmin(SignedRows):
    """Maintenance and aggregates of an open bundle; see the module doc."""

    if TYPE_CHECKING:  # what `Bundle` provides (see there)
        transaction: Callable[[], contextlib.AbstractContextManager[sqlite3.Connection]]
        writable: bool
        _follow_replacement: Callable[[], None]
        tune: Callable[[str], TuneRecord | None]
        each_kernel: Callable[..., Iterator[KernelRecord]]
        each_tune: Callable[..., Iterator[TuneRecord]]

    # -- the manifest and fingerprints ------------------------------------------------------
    def manifest(self) -> dict[str, str]:
        from warmcli.bundle.manifest import _manifest_row

        rows = self._metadata("manifest")
        return dict(self._parse("manifest", r[0], lambda r=r: _manifest_row(r)) for r in rows)

    def fingerprints(self) -> list[dict[str, object]]:
        from warmcli.bundle.manifest import _fingerprint

        rows = self._metadata("fingerprints")
        return [self._parse("fingerprint", r[0], lambda r=r: _fingerprint(r)) for r in rows]

    def _metadata(self, table: str) -> list[tuple[Any, ...]]:
        """The raw rows of "manifest" or "fingerprints", as few as each may hold (`_few`)."""
        from warmcli.bundle import manifest as m  # on first use: a serving process never reads

        if table == "manifest":
            return self._few(m.MANIFEST_SELECT, m.MANIFEST_ROWS, table)
        return self._few(m.FINGERPRINT_SELECT, m.FINGERPRINT_ROWS, table)

    def vacuum(self) -> None:
        """Give freed pages back to the file system, under the bundle's lock."""
        if not self.writable:
            raise BundleError(f"{self.path}: bundle is open read-only")
        from warmcli.bundle.lock import write_lock  # on first use: a serving process never writes

        with write_lock(self.path), self._lock, _sqlite_errors(self.path):
            self._follow_replacement()
            settle_journal(self.path)  # a journal planted since the open: never SQLite's
            try:
                _retrying(self.path, lambda: self._conn.execute("VACUUM"))
            finally:  # (a refused one rolled back: the journal SQLite left hot, played back)
                rolled_back(self._conn)

    # -- listings for maintenance ----------------------------------------------------------
    def keys(self, table: str) -> Iterator[tuple[str, object]]:
        """(key, pick) of every tune (table "tunes"; of a kernel, its blob's sha256 text),
        ordered by key and streamed, without reading the rest of the row; `BundleError` if
        a key is not a sha256 in hex (a value past the limit of a name reads as None)."""
        assert table in ("kernels", "tunes")
        key = KEY_HEX if table == "tunes" else "key"  # a tune's key is stored as bytes
        bad = self._one(
            f"SELECT 1 FROM {table} WHERE typeof({key}) != 'text' OR length({key}) != 64 "
            f"OR {key} GLOB '*[^0-9a-f]*' LIMIT 1"
        )
        if bad is not None:
            raise BundleError(f"{self.path}: corrupt bundle ({table} hold a key not a sha256)")
        column = "pick" if table == "tunes" else "sha256"
        pick = f"CASE WHEN length({column}) <= {MAX_NAME_CHARS} THEN {column} END"
        return self._iter(f"SELECT {key}, {pick} FROM {table} ORDER BY key")

    def each_orphan(self) -> Iterator[KernelRecord]:
        """The well-formed kernels whose blob the bundle does not hold, streamed."""
        from warmcli.bundle.oversize import each_named  # as every listing here: on first use

        orphans = f"{KERNEL_SELECT} WHERE sha256 NOT IN (SELECT sha256 FROM blobs) AND "
        rows = self._iter(f"{orphans}{self.skipped('kernels')} ORDER BY device, arch, label")
        return each_named(self, "kernel", _kernel_record, rows, lambda *_: None)

    def blob_problems(self, *, unused: bool = False, hashed: bool = False) -> Iterator[str]:
        """Kernels whose blob the bundle does not hold (its row missing, or holding no
        binary: text or a number, which every reader takes as missing), and blobs a kernel
        uses whose size (one a kernel row may say) is not their length: entries the bundle
        cannot serve, named without reading or hashing a blob. With `unused`, also such
        blobs no kernel uses (a corrupt file, though every entry is served). `hashed`: the
        caller hashes every blob (`integrity`), which names one holding no binary already."""
        for k in self.each_orphan():
            yield f"kernel {k.label} ({k.device} {k.arch}) has no blob {k.sha256[:16]}"
        for sha, size, length, used, kind in self._iter(_BLOB_PROBLEMS):  # one scan of the blobs
            if (used or unused) and not (hashed and kind != "blob"):
                why = "" if used else " (no kernel uses it)"
                what = f"is {length} bytes, its entry says {size}"
                what = what if kind == "blob" else f"is no binary (its data is {kind})"
                yield f"blob {str(sha)[:16]} {what}{why}"

    def each_kernel_used(
        self, on_error: OnError | None = None, *, order: str = ""
    ) -> Iterator[tuple[KernelRecord, tuple[float, float]]]:
        """Every kernel with its (created, last_used) times, streamed as `each_kernel`."""
        from warmcli.bundle.oversize import each_named

        select = KERNEL_SELECT.replace(" FROM kernels", ", created, last_used FROM kernels")

        def parse(row: tuple[Any, ...]) -> tuple[KernelRecord, tuple[float, float]]:
            return _kernel_record(row[:-2]), _usage_row((row[0], *row[-2:]))[1]

        rows = self._rows(select, order or "device, arch, label", "entry", None)
        return each_named(self, "kernel", parse, rows, on_error)

    def usage(self) -> dict[str, tuple[float, float]]:
        """Every kernel's (created, last_used) times, by key."""
        rows = self._all("SELECT key, created, last_used FROM kernels")
        return dict(self._parse("kernel", r[0], lambda r=r: _usage_row(r)) for r in rows)

    def usage_of(self, keys: Sequence[str]) -> dict[str, tuple[float, float]]:
        """The (created, last_used) times of the kernels under `keys` (a listing's, bounded)."""
        found: dict[str, tuple[float, float]] = {}
        for start in range(0, len(keys), 500):
            chunk = tuple(keys[start : start + 500])
            sql = "SELECT key, created, last_used FROM kernels WHERE key IN (%s)"
            for r in self._all(sql % ", ".join("?" * len(chunk)), chunk):
                found.update([self._parse("kernel", r[0], lambda r=r: _usage_row(r))])
        return found

    # -- maintenance: removal, vacuum, integrity (warm clean, merge, verify) ----------------
    def delete(
        self, kernel_keys: Sequence[str] = (), tune_keys: Sequence[str] = (), rows: Rows = ((), ())
    ) -> int:
        """Remove kernels and tunes, and `rows` no listing reads (`warmcli.bundle.unreadable`),
        then what no entry uses any more, in one transaction (`warmcli.bundle.unused.remove`);
        returns blobs removed. Freed pages are zeroed (a removed binary left unreadable in the
        file) but where the disk has no room for their journal (`FAST`: readable till a vacuum)."""
        from warmcli.bundle.unused import remove

        try:
            with self.transaction() as conn:
                return remove(conn, "ON", kernel_keys, tune_keys, rows)
        except BundleError as exc:
            if not exc.disk_refusal:
                raise
        with self.transaction() as conn:  # no room for the zeroed pages' journal
            return remove(conn, "FAST", kernel_keys, tune_keys, rows)

    def tune_keys(self) -> list[str]:
        rows = self._all(f"SELECT {KEY_HEX} FROM tunes ORDER BY key")
        return [self._parse("tune", r[0], lambda r=r: _named("key", _hex64, r[0])) for r in rows]

    def blob_digests(self) -> Iterator[tuple[str, int, str]]:
        """(stored sha256, stored size, sha256 of the data) of every blob, one at a time, each
        hashed a chunk at a time (Python 3.11+); "" for one not binary or over the limit."""
        sizes = "SELECT sha256, size, length(data), typeof(data), rowid FROM blobs ORDER BY sha256"
        for sha, size, length, kind, rowid in self._iter(sizes):  # a batch at a time
            actual = ""
            if kind == "blob" and isinstance(length, int) and length <= MAX_BLOB_BYTES:
                actual = digest(self, rowid)
            stored_size = size if isinstance(size, int) and not isinstance(size, bool) else -1
            yield str(sha)[:MAX_NAME_CHARS], stored_size, actual

    def signed_rows(self, tables: Sequence[str], shown: int) -> tuple[int, list[tuple[str, str]]]:
        """How many rows `row_hashes` reads, counted in SQL, and (table, key) of the first
        `shown` of `tables`' in its order: a report on a bundle none covers, no row hashed."""
        total, first = 0, []
        for table, select in SIGNED_ROWS:  # those no listing reads skipped (named as corrupt)
            select += f" {'AND' if ' WHERE ' in select else 'WHERE'} {self.skipped(table)}"
            row = self._one(f"SELECT count(*) FROM ({select})")
            total += int(row[0]) if row else 0
            if table in tables and len(first) < shown:
                keys = key_select(table, select)  # its key alone: no other value loaded
                with self._reading():
                    cursor = _retrying(self.path, lambda s=keys: self._conn.execute(s))
                    rows = cursor.fetchmany(shown - len(first))
                    cursor.close()
                first += [(table, str(r[0])[:MAX_NAME_CHARS]) for r in rows]
        return total, first

    def integrity_check(self) -> list[str]:
        """SQLite's own page-level check: [] when the file is sound."""
        from warmcli.bundle.oversize import refused

        try:
            rows = [str(r[0]) for r in self._all("PRAGMA integrity_check")]
        except BundleError as exc:  # an index holding a value too long: name its entry
            raise refused(self, exc) from None
        return [] if rows == ["ok"] else rows

    def integrity(self) -> Iterator[tuple[str, str | None]]:
        """Every check of `warm verify` but signatures, streamed in order as (what, problem):
        one ("blob" | "kernel" | "tune", problem or None) per blob and row, ("", problem)
        for SQLite's page check, the manifest and kernels without their blob. Call it
        inside `snapshot`, so a writer committing meanwhile never looks like corruption.
        The tunes of a large bundle are checked meanwhile in other processes (`TuneChecks`)."""
        from warmcli.bundle.checking import TuneChecks, checked  # verify's: never a serving one
        from warmcli.bundle.manifest import metadata_problems

        tunes = TuneChecks(self, lambda b: self.each_tune(None, b, order=AS_STORED, samples=False))
        try:
            for line in self.integrity_check():  # one finding may span lines: one line
                yield "", f"sqlite: {' '.join(line.split())}"
            metadata = self._metadata("manifest"), self._metadata("fingerprints")
            for problem in metadata_problems(*metadata, self.format_version()):
                yield "", problem
            for sha, _size, actual in self.blob_digests():
                yield (
                    "blob",
                    None if actual == sha else f"blob {sha[:16]} does not match its sha256",
                )
            kernels = self.each_kernel_used  # its times too, as `warm stats` reads them
            yield from checked("kernel", lambda bad: kernels(on_error=bad, order=AS_STORED))
            yield from (("", problem) for problem in self.blob_problems(unused=True, hashed=True))
            yield from tunes
        finally:
            tunes.close()

    def tunes_between(self, low: int, high: int, on_error: OnError) -> Iterator[object]:
        """`each_tune`'s checks of the rows whose rowid is in (low, high], in rowid order."""
        from warmcli.bundle.tune_layout import laid_tunes  # verify's: never a serving one

        sql = f"{TUNE_SELECT} WHERE rowid > ? AND rowid <= ? AND {self.skipped('tunes')}"
        rows = self._iter(f"{sql} ORDER BY rowid", (low, high))  # (as a serving read: no sample)
        return laid_tunes(self, rows, on_error, samples=False)

    def rowid_span(self, table: str) -> tuple[int, int]:
        """The least and greatest rowid of `table` ((1, 0) when it is empty)."""
        assert table in ("kernels", "tunes")
        row = self._one(f"SELECT min(rowid), max(rowid) FROM {table}")
        return (int(row[0]), int(row[1])) if row and row[0] is not None else (1, 0)

    # -- aggregates (`warm stats` on a bundle too large to list) ----------------------------
    def aggregate(
        self, sample: int = 0, operation: str | None = None, shown: Any = None
    ) -> tuple[list[tuple[str, str, int, int]], list[tuple[str, str, int, int]], list[Any]]:
        """Counts by SQL, without reading every entry: (device, arch, kernels, bytes of their
        distinct blobs) and (operation, device, tunes, pending), plus `sample` tunes read whole
        (each as `shown(tune)` if given): of `operation` only, by shape, if given; else as
        many of each operation as fit, by shape (a malformed one is left out)."""
        from warmcli.bundle.oversize import refused

        def group(row: tuple[Any, ...]) -> tuple[str, str, int, int]:
            a, b = _named("name", _name, row[0]), _named("name", _name, row[1])
            return a, b, int(row[2] or 0), int(row[3] or 0)

        try:  # a value too long to read: the entry holding it is named (`refused`)
            kernel_rows = self._all(
                "SELECT k.device, k.arch, k.n, coalesce(b.bytes, 0) FROM "
                "(SELECT device, arch, count(*) AS n FROM kernels GROUP BY device, arch) AS k "
                "LEFT JOIN (SELECT device, arch, sum(size) AS bytes FROM "
                "(SELECT DISTINCT device, arch, sha256 FROM kernels) JOIN blobs USING (sha256) "
                "GROUP BY device, arch) AS b USING (device, arch) ORDER BY k.device, k.arch"
            )
            tune_rows = self._all(
                f"SELECT operation, device, count(*), sum({PENDING}) FROM tunes "
                "GROUP BY operation, device ORDER BY operation, device"
            )
            return (
                [self._parse("kernel group", r[0], lambda r=r: group(r)) for r in kernel_rows],
                [self._parse("tune group", r[0], lambda r=r: group(r)) for r in tune_rows],
                self._sample_tunes(sample, operation, shown),
            )
        except BundleError as exc:
            raise refused(self, exc) from None

    def _sample_tunes(self, sample: int, operation: str | None, shown: Any = None) -> list[Any]:
        """`sample` tunes by shape, numbers as numbers (`natural`): of `operation` if given,
        else of the first operations by name, each one's first, then second, ..."""
        shapes = f"SELECT substr(shape_key, 1, {MAX_NAME_CHARS}), {KEY_HEX} FROM tunes WHERE "
        ops = [operation] if operation is not None else self.operations(sample)
        rows = (self._iter(f"{shapes} operation = ?", (op,)) for op in ops)
        firsts = [
            first_naturally(sample, r, key=lambda r: (natural(r[0]), str(r[1]))) for r in rows
        ]
        found: list[Any] = []
        for key in [each[n][1] for n in range(sample) for each in firsts if n < len(each)]:
            with contextlib.suppress(BundleError):  # a malformed one is not shown
                got = filter(None, [self.tune(str(key)[:MAX_NAME_CHARS])])
                found += map(shown, got) if shown else got
            if len(found) == sample:
                break
        return found

    def operations(self, limit: int) -> list[str]:
        """The first `limit` operations held (well-formed ones), by name, numbers as numbers."""
        names = self._iter("SELECT DISTINCT operation FROM tunes")
        ok = (n for (n,) in names if isinstance(n, str) and len(n) <= MAX_NAME_CHARS)
        return first_naturally(limit, ok)

    def count(self, table: str) -> int:
        """How many kernels or tunes the bundle holds."""
        assert table in ("kernels", "blobs", "tunes")
        row = self._one(f"SELECT count(*) FROM {table}")
        return int(row[0]) if row else 0

    def counts(self) -> dict[str, int]:
        return {t: self.count(t) for t in ("kernels", "blobs", "tunes")}

    def blob_users(self) -> Iterator[tuple[str, int]]:
        """(sha256, kernels) of each binary more than one kernel uses (a batch's), streamed."""
        rows = self._iter(
            "SELECT sha256, count(*) FROM kernels WHERE typeof(sha256) = 'text' "
            f"AND length(sha256) <= {MAX_NAME_CHARS} GROUP BY sha256 HAVING count(*) > 1"
        )
        return ((str(sha), int(n)) for sha, n in rows)

    def has_operation(self, operation: str) -> bool:
        return self._one("SELECT 1 FROM tunes WHERE operation = ?", (operation,)) is not None


def _corrupt_blobs(bundle: BundleAdmin) -> dict[str, str]:
    """Every kernel's blob that is missing, fails its sha256 (read one at a time) or whose
    size lies (never served: `blob_problems`)."""
    bad = {
        sha: "its blob does not match its sha256"
        for sha, _, actual in bundle.blob_digests()
        if actual != sha
    }
    for sha, size, length, _ in bundle._iter(_SIZE_LIES):
        bad.setdefault(str(sha), f"its blob is {length} bytes, its entry says {size}")
    for k in bundle.each_orphan():
        bad[k.sha256] = "its blob is missing"
    return bad


def drop_corrupt(bundle: BundleAdmin) -> int:
    """Remove every kernel whose blob is missing or fails its sha256, so a `warm run`
    over the bundle builds again what its workload reaches; returns kernels removed."""
    bad = _corrupt_blobs(bundle)
    if not bad:
        return 0
    kernels = bundle.each_kernel(on_error=lambda *_: None, order=AS_STORED)
    keys = [k.key for k in kernels if k.sha256 in bad]
    if keys:
        bundle.delete(keys)
    return len(keys)
