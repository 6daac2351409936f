"""A tune row of a bundle: how it is read (bounded, as hex and text), parsed, signed and written.

Format 3 (`warmcli.bundle.schema`) stores a tune's key and checksum as their 32
bytes and its status as a code; `TUNE_SELECT` reads them back as hex and text in
SQL, so a row of any format reaches the parser alike and the runtime only ever sees
hex keys (`key_param` is a key as a lookup matches it, in either form). `_tune_record`
is the one parser of a tune row (`parsed_tunes`: a listing's rows through it): every
field checked (a tune's key against its fields, a measured tune's pick one of its
candidates that ran, every time finite and not negative), the candidates
unpacked (`warmcli.bundle.candidates`; an interned kernel key read through the
reader's `kernel_key`). A serving read (`samples=False`: `Bundle.tune` for a production
process, `warm verify`'s checks) makes no sample and keeps no reason, yet decides as the
full read does: everything that says whether the pick may be served (the document's
every count, length, flag and kernel id against its bytes, its bound, each candidate's
status and name, the row's fields and key, the pick an ok candidate) and the times too,
each checked as bytes (`candidates._small_times`: finite, not negative, their sum finite),
so a row refused by `warm verify` is never served, nor one served that verify refuses;
its cost is its inflating and one pass over its bytes at C speed, not a float a sample.
`signed_values` is what a signature covers of a row (its
candidates' `signed_form` where they name kernels by id, so a signature covers the
kernel keys, not only the ids), and `tune_values` is the row `Bundle.put`
writes (its kernel keys interned by `interner`, through the writer's connection; an id
it refuses, `warm verify` names: `kernel_id_problems`). It holds no state and opens
nothing itself.
"""

from __future__ import annotations

import _sqlite3 as sqlite3  # as `warmcli.bundle.file`
import contextlib
import math
import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from warmcli.bundle.candidates import (
    Intern,
    KernelKey,
    as_bytes,
    decode,
    interned,
    kernel_ids,
    pack,
    signed_form,
    unpack,
)
from warmcli.bundle.rows import (
    _HEX64,
    MAX_NAME_CHARS,
    MAX_TEXT_CHARS,
    Column,
    OnError,
    RowReader,
    _bounded_select,
    _hex64,
    _Malformed,
    _name,
    _seconds,
    _text,
    _within_limits,
    held_alike,
)
from warmcli.bundle.schema import STATUS_TEXT, TUNE_STATUSES
from warmcli.errors import BundleError
from warmcli.records import CandidateMeasurement, TuneRecord, tune_key


def _as_hex(column: str) -> str:
    return f"CASE WHEN typeof({column}) = 'blob' THEN lower(hex({column})) ELSE {column} END"


_READ: dict[str, str] = {"key": _as_hex("key"), "checksum": _as_hex("checksum")}
_READ["status"] = STATUS_TEXT
PENDING = f"({STATUS_TEXT}) = 'pending'"  # SQL: whether a row is a pending tune
KEY_HEX = _READ["key"]  # SQL: a tune's key as hex, whichever way it is stored
BY_KEY = "key IN (?, ?)"  # SQL: the row of one key (`key_param`), stored as bytes or as hex
_LIMITS: tuple[Column, ...] = (
    *((c, MAX_NAME_CHARS, _READ.get(c, c)) for c in ("key", "operation")),
    ("shape_key", MAX_TEXT_CHARS),
    *((c, MAX_NAME_CHARS, _READ.get(c, c)) for c in ("device", "checksum", "status", "pick")),
    ("candidates", MAX_TEXT_CHARS),
    ("seconds", None),
    ("measured_at", None),
)
TUNE_SELECT = _bounded_select(_LIMITS, "tunes")
TUNE_ORDER = "operation, shape_key"  # SQL: `each_tune`'s order (a listing's, its ranges')
TUNE_COLUMNS = ", ".join(c[2] if len(c) > 2 else c[0] for c in _LIMITS)  # type: ignore[misc]  # the signed columns, read as hex and text
TUNE_WIDTH = len(_LIMITS)
_CANDIDATES = 7  # where a row's candidates are
_MAX_ID = (1 << 32) - 1  # the largest kernel id a tune's packed candidates hold
_KEPT_ID = 1 << 31  # an id kept (`carried`) is below: the ids a merge adds after it still fit
_STATUSES = {"ok", "failed", "pending"}
_TUNE_FIELDS = (
    ("key", _hex64),
    ("operation", _name),
    ("shape_key", _text),
    ("device", _name),
    ("checksum", _hex64),
    ("status", lambda value: _name(_status_code(value))),
    ("pick", _name),
    ("seconds", _seconds),
    ("measured_at", _seconds),
)


def key_param(key: str) -> tuple[object, str]:
    """The parameters of `BY_KEY` for a tune's key (hex): its bytes and its text."""
    return as_bytes(key), key


def tune_values(
    tune: TuneRecord, intern: Intern, now: float, packed: bytes | None = None
) -> tuple[object, ...]:
    """The row of `tune` as format 3 stores it (kernel keys interned by `intern`; its
    candidates `packed` where given: `carried`)."""
    status = TUNE_STATUSES.index(tune.status) if tune.status in TUNE_STATUSES else tune.status
    return (
        as_bytes(tune.key),
        tune.operation,
        tune.shape_key,
        tune.device,
        as_bytes(tune.checksum),
        status,
        tune.pick,
        pack(tune.candidates, intern) if packed is None else packed,
        tune.seconds,
        tune.measured_at,
        now,
    )


# A tune row another writer of one bundle stored since `since` (two CI jobs at once) with the
# same decision: the same operation, shape, device, candidate set, status and pick; stored
# no later than this write (a row stamped in the future is no writer's of this run's time).
_SAME_TUNE = (
    "SELECT 1 FROM tunes WHERE key = ? AND operation = ? AND shape_key = ? AND device = ? AND "
    "checksum = ? AND status = ? AND pick IS ? AND updated BETWEEN ? AND ?"
)


def write_tune_row(conn: sqlite3.Connection, values: tuple[object, ...], since: float) -> bool:
    """Write the tune row `values` (`tune_values`) in the writer's transaction on `conn`;
    whether it wrote it. A row another writer stored since `since` (when this writer
    opened the bundle) with the same decision is kept as it is, as `write_kernel_row`
    keeps a kernel stored alike: the run that stored it first stored it, this one adds
    nothing (its own samples differ, its pick does not). An older row is replaced, as a
    run re-measures one on purpose (one no trusted key signed, say), and so is one stamped
    after this write (`values`' own `updated`): a bundle from elsewhere, or a clock that
    jumped, says nothing of a writer since; kept, its foreign row would be signed as this
    run's."""
    if held_alike(conn, _SAME_TUNE, (*values[:7], since, values[-1])):
        return False
    conn.execute("INSERT OR REPLACE INTO tunes VALUES (?,?,?,?,?,?,?,?,?,?,?)", values)
    return True


class Interning(Protocol):
    """`interner`'s: a kernel key's 32 bytes -> its id (the id `wanted` where no key holds
    it yet and it is below `_KEPT_ID`: `carried`'s, a merge's first input's id kept)."""

    def __call__(self, key: bytes, wanted: int = -1) -> int: ...


def interner(conn: sqlite3.Connection, path: object) -> Interning:
    """Inside one write transaction on `conn` (the bundle at `path`): a kernel key's id in
    `tune_kernels`, the key added where it is new (each key looked up once by the function
    returned). An id a tune cannot name (candidates pack ids in 32 bits: a bundle's own, or
    the one SQLite picks after it) is a `BundleError`, rolling the transaction back."""
    ids: dict[bytes, int] = {}

    def intern(key: bytes, wanted: int = -1) -> int:
        if key not in ids:
            if 0 <= wanted < _KEPT_ID:  # (taken, or the key held already: ignored)
                add = "INSERT OR IGNORE INTO tune_kernels (id, key) VALUES (?, ?)"
                conn.execute(add, (wanted, key))
            conn.execute("INSERT OR IGNORE INTO tune_kernels (key) VALUES (?)", (key,))
            row = conn.execute("SELECT id FROM tune_kernels WHERE key = ?", (key,)).fetchone()
            if not 0 <= row[0] <= _MAX_ID:
                raise BundleError(
                    f"{path}: corrupt bundle: kernel id {row[0]} in tune_kernels is out of "
                    f"range (0 to {_MAX_ID}); nothing was written"
                )
            ids[key] = int(row[0])
        return ids[key]

    return intern


def kernel_id_problems(reader: Any) -> list[str]:
    """A line saying how many rows of the open bundle's `tune_kernels` hold an id no tune's
    candidates can name (out of 0 to `_MAX_ID`: a write that interns their key refuses the
    bundle, `interner`), if any; else [] (a bundle of format 1 or 2 has no such table)."""
    if reader.format_version() < 3:
        return []
    found = reader._one(f"SELECT count(*) FROM tune_kernels WHERE id NOT BETWEEN 0 AND {_MAX_ID}")
    held = f"tune_kernels holds {found[0]} kernel id(s) out of range (0 to {_MAX_ID})"
    return [f"{held}: a tune of their kernels is never written"] if found[0] else []


def signed_values(row: Sequence[object], kernel_key: KernelKey) -> tuple[object, ...]:
    """What a signature covers of a tune row (its `TUNE_COLUMNS`): as read, but candidates
    that name kernels by id with those kernels' keys (`signed_form`; as read where an id
    is not one the bundle holds)."""
    values = tuple(row[:TUNE_WIDTH])
    cands = values[_CANDIDATES]
    if interned(cands):
        with contextlib.suppress(ValueError, KeyError, TypeError, OverflowError):
            cands = signed_form(cands, kernel_key)
    return (*values[:_CANDIDATES], cands, *values[_CANDIDATES + 1 :])


def _why(exc: Exception) -> str:
    """What a candidates document that does not decode lacks, in words (not Python's)."""
    if isinstance(exc, KeyError):
        return f"no field {exc.args[0]!r}"[:80] if exc.args else "a field is missing"
    if isinstance(exc, OverflowError):
        return "a number out of range"
    if isinstance(exc, TypeError):
        return "a field of the wrong type"
    return str(exc)


def _plain(
    key: object,
    operation: Any,
    shape_key: Any,
    device: Any,
    checksum: Any,
    status: Any,
    pick: Any,
    secs: Any,
    measured_at: Any,
) -> bool:
    """Whether every field of a tune row is what warm writes, as `_TUNE_FIELDS` checks
    each, in one expression (else `_fields` says which, and why)."""
    return bool(
        str is type(operation) is type(shape_key) is type(device) is type(status)
        and (pick is None or type(pick) is str)
        and float is type(secs) is type(measured_at)
        and 0.0 <= secs < math.inf
        and 0.0 <= measured_at < math.inf
        and len(operation) <= MAX_NAME_CHARS
        and len(shape_key) <= MAX_TEXT_CHARS
        and len(device) <= MAX_NAME_CHARS
        and len(status) <= MAX_NAME_CHARS
        and (pick is None or len(pick) <= MAX_NAME_CHARS)
        and type(checksum) is str
        and _HEX64.fullmatch(checksum)
        and status in TUNE_STATUSES
        and tune_key(operation, shape_key, device, checksum) == key  # so: a sha256 in hex
    )


def _tune_record(
    row: tuple[object, ...], kernel_key: KernelKey | None = None, samples: bool = True
) -> TuneRecord:
    key, operation, shape_key, device, checksum, status, pick, cands, secs, measured_at, over = row
    if over is not None:
        _within_limits(row)  # names the field over its limit
    try:
        if type(cands) is bytes:  # (without `samples`: none made, each time checked as bytes)
            candidates = unpack(cands, kernel_key, samples)
        else:
            candidates = decode(cands, kernel_key)
    except (ValueError, KeyError, TypeError, OverflowError) as exc:
        raise _Malformed(f"candidates: {_why(exc)}"[:200]) from None
    for c in candidates:
        if c.status not in _STATUSES or len(c.name) > MAX_NAME_CHARS:
            raise _Malformed(f"candidates: a candidate with status {c.status[:20]!r}")
        # A sum of finite times is finite unless one is not (or it overflows: refused too).
        if not math.isfinite(sum(c.samples, c.seconds or 0.0)):
            what = "a time that is not finite" if _unfinished(c) else "times summing past 1e308"
            raise _Malformed(f"candidates: {c.name[:40]!r} has {what}")
        if min(c.samples, default=0.0) < 0 or (c.seconds or 0.0) < 0:  # -0.0 is no less
            raise _Malformed(f"candidates: {c.name[:40]!r} has a negative time")
    if not _plain(key, operation, shape_key, device, checksum, status, pick, secs, measured_at):
        values = (key, operation, shape_key, device, checksum, status, pick, secs, measured_at)
        key, operation, shape_key, device, checksum, status, pick, secs, measured_at = _fields(
            values
        )
        if status not in TUNE_STATUSES:
            raise _Malformed(f"status: {str(status)[:20]!r} is not a tune status")
        if tune_key(operation, shape_key, device, checksum) != key:  # type: ignore[arg-type]
            raise _Malformed("key: not the key of its operation, shape, device and candidate set")
    if status == "measured":  # production serves only a pick that ran: so must verify
        for picked in candidates:  # the first candidate of that name, if any
            if picked.name == pick:
                break
        else:
            picked = None
        if pick is None:
            raise _Malformed("pick: a measured tune with no pick")
        if picked is None or picked.status != "ok":
            what = "not one of its candidates" if picked is None else "a candidate that failed"
            raise _Malformed(f"pick: {pick[:40]!r} is {what}")  # type: ignore[index]
    if not samples and any(c.samples or c.reason for c in candidates):  # format 1, or odd times
        candidates = tuple(CandidateMeasurement(*c._values()[:4]) for c in candidates)
    return TuneRecord(
        key, operation, shape_key, device, checksum, status, pick, candidates, secs, measured_at
    )  # type: ignore[arg-type]


def parsed_tunes(
    reader: RowReader,
    rows: Iterable[tuple[Any, ...]],
    on_error: OnError | None,
    samples: bool = True,
) -> Iterator[TuneRecord]:
    """The tunes of `rows` (`TUNE_SELECT`'s, read by `reader`), each through `_tune_record`
    (an interned kernel key through the reader's); a row that is not what warm writes is
    a `BundleError` naming it, or given to `on_error`; one holding a value longer than
    warm reads, a `BundleError` naming it (`warmcli.bundle.oversize.each_named`)."""
    from warmcli.bundle.oversize import each_named  # a listing's: never a serving one's

    kernel_key = reader._kernel_key
    parse = lambda row: _tune_record(row, kernel_key, samples)  # noqa: E731
    return each_named(reader, "tune", parse, rows, on_error)


def carried_tunes(reader: RowReader, order: str) -> Iterator[tuple[TuneRecord, object]]:
    """Every tune of `reader`'s bundle in `order` as a serving read reads it (no sample
    made, every check kept), with its row's candidates as stored, for `carried` (`warm
    merge`); a row that is not what warm writes is a `BundleError` naming it. A row of
    format 1 or 2 is read whole (its samples made): `carried` packs it anew from them (read
    twice, 120,000 candidates held twice: 57 MiB, not 40, tests/test_hostile46b.py)."""
    from warmcli.bundle.oversize import each_named

    kernel_key = reader._kernel_key

    def parse(row: tuple[object, ...]) -> tuple[TuneRecord, object]:
        value = row[_CANDIDATES]
        return _tune_record(row, kernel_key, not interned(value)), value

    return each_named(reader, "tune", parse, reader._rows(TUNE_SELECT, order, "", None), None)


def carried(
    reader: RowReader, tune: TuneRecord, value: object, intern: Interning, keep: bool = False
) -> bytes:
    """`tune`'s candidates as `carried_tunes` read them from `reader` (`value`, checked),
    packed for another bundle: a format-3 document as it is but for its head, each kernel id the one
    `intern` gives its kernel (nothing inflated, made or deflated again: a row of 7 KB may
    hold 500,000 samples); any other packed anew from `tune`'s candidates (read whole). With
    `keep` (a merge's first input: `warm run --dask`'s bundle itself), each id is kept where
    the output has it free, so its rows come out as they were, and a signature still covers them."""
    kernel_key = reader._kernel_key
    if not interned(value):
        return pack(tune.candidates, intern)
    assert isinstance(value, bytes)
    ids, at = kernel_ids(value)
    head = [intern(bytes.fromhex(kernel_key(i)), i if keep else -1) for i in ids]
    return value[:1] + struct.pack(f"<I{len(head)}I", len(head), *head) + value[at:]


def _unfinished(c: CandidateMeasurement) -> bool:
    """Whether one of `c`'s times is not finite (else their sum overflowed: 1e308 twice)."""
    return not all(map(math.isfinite, (*c.samples, c.seconds or 0.0)))


def _status_code(value: object) -> object:
    """A status read back as a code (`STATUS_TEXT` names the codes warm writes): refused."""
    if isinstance(value, int) and not isinstance(value, bool):
        raise _Malformed(f"code {value} is not a tune status (0 measured, 1 pending)")
    return value


def _fields(values: tuple[object, ...]) -> list[object]:
    """The fields of a tune row, each checked (`_TUNE_FIELDS`): `_Malformed` naming the
    first that is not what warm writes."""
    fields: list[object] = []
    name = "?"
    try:
        for (name, check), value in zip(_TUNE_FIELDS, values, strict=True):
            fields.append(None if value is None and name == "pick" else check(value))
    except _Malformed as exc:
        raise _Malformed(f"{name}: {exc}") from None
    return fields
