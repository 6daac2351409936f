"""A kernel row of a bundle as a `KernelRecord`: every field checked, fast.

`_kernel_record` is the one parser of a kernel row (`Bundle.kernel`, which raises the `BundleError`
naming a malformed row; `each_kernel`, the admin's reads): each field checked as
`warmcli.bundle.rows._KERNEL_FIELDS` says (its type, its length, a key's and a sha256's hex, an
entry's and a symbol's form, the symbol the one warm gives its entry under its key
(`_symbol_fits`), components a JSON object (a long one parsed only where flat, `flat_json`), a
finite time, a blob's size), and, where its components keep the kernel's content hash (`kernel`:
every row this warm writes), its key the one they give (`_key_problem`:
`warmcli.kernel_parts.key_of`), their arch, toolchain and entry its own, and a PTX row's symbol
that of a cubin of that kernel, as production ties it (a row moved under another build's key, whose
symbol alone ties no PTX, is malformed, never judged servable by `warm check`; an older warm's row
without it is judged by its symbol alone; production, which keys a row from its own kernel, skips
the first for a cubin's or host build's row). A hot start parses thousands, so a row as warm writes
it passes the same checks written inline, in one frame; any other row takes the field-by-field
path, which names what is wrong. A prefetched chunk's rows are stepped from its caller's cursor,
their values counted against its budget, by `stepped`. `write_kernel_row` writes one record's row
for a writer. Its one state is `_names_a_cubin`'s: the few cubin archs PTX rows' symbols named
lately, tried first (an order, never a verdict); it runs no query itself.
"""

from __future__ import annotations

import _sqlite3 as sqlite3  # as `warmcli.bundle.file`
import functools
import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable
from typing import Any

from warmcli.bundle import flat_json
from warmcli.bundle import rows as limits  # its limits read at each call, as its checks do
from warmcli.bundle.rows import (
    _HEX64,
    _IDENTIFIER,
    _KERNEL_FIELDS,
    _SYMBOL,
    KERNEL_COLUMNS,
    MAX_NAME_CHARS,
    _json_object,
    _Malformed,
    _within_limits,
    held_alike,
)
from warmcli.kernel_parts import arch_keys, cubin_archs, key_of
from warmcli.records import KernelRecord, symbol_prefix


def _clip(log: str) -> str:
    """A compile log cut to what a bundle may hold (its head and its tail)."""
    if len(log) <= limits.MAX_TEXT_CHARS:
        return log
    half = limits.MAX_TEXT_CHARS // 2 - 64
    return f"{log[:half]}\n[... {len(log) - 2 * half} characters cut ...]\n{log[-half:]}"


PREFETCH_VALUE_BYTES = 64 << 10  # each value of a kernel row prefetched for serving
# A prefetched row: `KERNEL_COLUMNS`, its blob's size (`KERNEL_SELECT`'s subquery's, by a left
# join: a subquery run per row cost ~0.2 µs CPU a row more; the blob's index pages read for
# its read, with no statement of its own), then its rowid, of a device's rows. No value longer
# than `PREFETCH_VALUE_BYTES` is loaded: SQLite refuses it (`Bundle.kernel_rows` reads under
# that limit; `chunk` passes over the row), so each value is read as it is, with no
# `length()` per column and row (half of SQLite's time for a row); their memory is counted
# in Python (`_chars`). Its texts are few, far below the limit of a label, the components
# or a log, so a name longer than a name may be is named here, as `KERNEL_SELECT`'s last
# column would name it (`_over_limit`).
_NAMES = ("key", "device", "backend", "arch", "entry", "symbol", "sha256", "toolchain")
_NAMED_AT = tuple(zip(_NAMES, (0, 1, 2, 3, 4, 6, 7, 8), strict=True))  # in KERNEL_COLUMNS
_VALUES = (*(f"k.{c}" for c in KERNEL_COLUMNS.split(", ")), "b.size")  # all but the rowid
_PREFETCH_SELECT = (  # from a rowid, or skipping
    f"SELECT {', '.join(_VALUES)}, k.rowid FROM kernels AS k LEFT JOIN blobs AS b ON "
    "b.sha256 = k.sha256 WHERE k.backend = ? AND k.arch = ? AND k.rowid >= ? "
    "ORDER BY k.rowid LIMIT ? OFFSET ?"
)
# The first row at or after a rowid of a device's kernels: a row `chunk` passes over.
_ROWID_FROM = (
    "SELECT rowid FROM kernels WHERE backend = ? AND arch = ? AND rowid >= ? ORDER BY rowid LIMIT 1"
)
# A row's key, sha256, entry and symbol, each followed by a NUL, checked in one match: no
# pattern matches a NUL, so the joined text matches iff each part matches its own pattern.
# Its names that take any text (device, backend, arch, toolchain) follow, unmatched
# (`_NAMES_MATCH`: the four at the start of all eight joined). One pattern: compiling one
# costs an import ~0.2 ms.
_JOINED = re.compile("".join(p.pattern + "\x00" for p in (_HEX64, _HEX64, _IDENTIFIER, _SYMBOL)))
_NAMES_MATCH = _JOINED.match
_NEW = object.__new__
_SET = object.__setattr__
_SCAN = json.JSONDecoder().scan_once  # the decoder `json.loads` uses, as configured there
_HEX64_TEXT = re.compile("[0-9a-f]{64}").fullmatch  # `_HEX64`'s, with no frame of its own
_SHA256 = hashlib.sha256
_QUOTE = json.encoder.encode_basestring_ascii  # one string as `key_of` writes it
_EMPTY_JOIN = "".join


def _kernel_record(row: tuple[object, ...], keyed: bool = False) -> KernelRecord:
    """A kernel row as a record: each field checked as `_KERNEL_FIELDS` says. A hot start
    parses thousands: a row as warm writes it passes the same checks written inline (one
    frame); any other row takes the field-by-field path, which names what is wrong.
    `keyed`: the caller keyed the row itself, from its own kernel, and judges the build by
    that kernel (production: `serving.of_kernel`), so a cubin's or host build's row is not
    keyed again from its components (a sha256 a row, ~2 µs a served kernel)."""
    if len(row) == 14 and (row[13] is None or type(row[13]) is int):  # by key, or prefetched
        key, device, backend, arch, entry, label, symbol, sha, tool, comps, log, secs, size, _ = row
        try:  # its names as one text: a value no text (a number, bytes, NULL) raises here
            names = "\x00".join((key, sha, entry, symbol, device, backend, arch, tool))
        except TypeError:
            names = ""  # matches no pattern: the field-by-field path names it
        if (  # stricter than `_KERNEL_FIELDS` where it may be (lengths summed): else that path
            len(names) <= limits.MAX_NAME_CHARS
            and _NAMES_MATCH(names)
            and symbol[22:] == entry  # `_symbol_fits`, inline (no frame per row)
            and (symbol[5:21] == key[:16] or arch[:8] == "compute_")
            and type(label) is str
            and type(log) is str
            and type(comps) is str
            and len(label) + len(log) + len(comps) <= limits.MAX_TEXT_CHARS
            and type(secs) is float
            and 0 <= secs < math.inf
            and type(size) is int
            and 0 <= size <= limits.MAX_BLOB_BYTES
        ):
            try:  # its components as `_components` reads them, in one call for warm's own
                components, end = _SCAN(comps, 0) if len(comps) <= flat_json.FLAT_CHARS else (0, -1)
            except (ValueError, StopIteration, RecursionError):
                end = -1
            if end != len(comps) or type(components) is not dict:
                components = _components(comps)  # as `json.loads` reads it, or named wrong
            else:
                for v in components.values():
                    if type(v) is not str:  # each value as text
                        components = {k: str(v) for k, v in components.items()}
                        break
            content = components.get("kernel")
            if content is not None and not (keyed and arch[:8] != "compute_"):  # `key_of`
                headers = components.get("headers")
                held = f'"headers":{_QUOTE(headers)},' if headers else ""
                if (
                    arch[:8] == "compute_"
                    or components.get("arch") != arch
                    or components.get("toolchain") != tool
                    or components.get("entry") != entry
                    or type(content) is not str
                    or not _HEX64_TEXT(content)
                    or (headers and not _HEX64_TEXT(headers))
                    or key
                    != _SHA256(
                        f'{{"arch":{_QUOTE(arch)},{held}"kernel":"{content}",'
                        f'"toolchain":{_QUOTE(tool)}}}'.encode()
                    ).hexdigest()
                ):
                    return _checked_kernel_record(row)  # a PTX row's checks, or what is wrong
            record = _NEW(KernelRecord)  # its fields, checked above, set as its __init__ would
            _SET(  # as its dict, made once (not copied into one)
                record,
                "__dict__",
                {
                    "key": key, "device": device, "backend": backend, "arch": arch,
                    "entry": entry, "label": label, "symbol": symbol, "sha256": sha,
                    "toolchain": tool, "components": components, "compile_log": log,
                    "seconds": secs, "size": size,
                }
            )  # fmt: skip
            return record
    return _checked_kernel_record(row)


# A kernel row as a writer would write it, but for its times (`write_kernel_row`).
_SAME_KERNEL = (
    "SELECT 1 FROM kernels WHERE key = ? AND device = ? AND backend = ? AND arch = ? AND "
    "entry = ? AND label = ? AND symbol = ? AND sha256 = ? AND toolchain = ? AND "
    "components = ? AND compile_log = ? AND typeof(seconds) = 'real' AND "
    "seconds BETWEEN 0 AND 1.7976931348623157e308"
)


# The same build (key, and so source, options, arch, toolchain) stored by another writer
# between `since` and now, its batch's binary there: only its batch neighbours differ.
_BUILT_SINCE = (
    "SELECT 1 FROM kernels AS k JOIN blobs AS b ON b.sha256 = k.sha256 WHERE k.key = ? AND "
    "k.device = ? AND k.backend = ? AND k.arch = ? AND k.entry = ? AND k.label = ? AND "
    "k.toolchain = ? AND k.components = ? AND k.created BETWEEN ? AND ? AND "
    "b.size = length(b.data) AND b.size > 0"
)
# A use (`Bundle.touch`, a merge's) moves `last_used` on, never back (a clock behind, 1970); a
# time that is no number (text, a blob, a NULL no schema of warm's holds) is replaced
TOUCH = "UPDATE kernels SET last_used = max(?, ifnull(last_used + 0, 0)) WHERE key = ?"


def write_kernel_row(
    conn: sqlite3.Connection, record: KernelRecord, now: float, since: float | None = None
) -> bool:
    """Write `record`'s row, created and last used `now`, in the writer's transaction on
    `conn`; whether it wrote it. A row the bundle holds alike but for its times (the same
    build, by another writer of one bundle: two CI jobs at once) is kept as it is: the run
    that wrote it first stored it, this one adds nothing. Given `since` (when this writer
    opened the bundle; None: a run that signs, `--key`, stores its own build), so is a row
    of the same build another writer stored since, in a batch of other neighbours (its
    binary is that batch's): a row stored before it opened, or stamped after now (a bundle
    from elsewhere), is no such job's, and replaced."""
    row = (
        record.key, record.device, record.backend, record.arch, record.entry, record.label,
        record.symbol, record.sha256, record.toolchain,
        json.dumps(record.components, sort_keys=True), _clip(record.compile_log),
    )  # fmt: skip
    if held_alike(conn, _SAME_KERNEL, row):
        return False
    built = (*row[:6], row[8], row[9], since, now)
    if since is not None and held_alike(conn, _BUILT_SINCE, built):
        return False
    conn.execute(
        "INSERT OR REPLACE INTO kernels VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (*row, record.seconds, now, now),
    )
    return True


def chunk(
    select: Callable[[int, int, int], sqlite3.Cursor],
    rowid_from: Callable[[int], tuple[Any, ...] | None],
    where: tuple[int, int, int],
    prefetched: int,
    budget: int,
) -> tuple[list[tuple[Any, ...]], int]:
    """A prefetched chunk's rows and the characters prefetched with them (`stepped`):
    `select(from_rowid, count, skip)` runs `_PREFETCH_SELECT` from `where` (a rowid, how
    many to skip, and the count of rows, or -1). A row SQLite cannot hand back is passed
    over (`rowid_from(rowid)`: the first row at or after it, `_ROWID_FROM`, which loads none
    of its values) and the chunk goes on after it, strictly on, so it ends. The refusal may
    come as the row before it is handed out (Python's cursor steps one ahead): the first
    row not got is read alone (a select of one row steps no further), and passed over only
    if that is refused too."""
    first, skip, count = where
    got: list[tuple[Any, ...]] = []

    def step(at: int, n: int, k: int) -> bool:
        """`select(at, n, k)`'s rows onto `got`; whether a row was refused."""
        nonlocal prefetched
        try:
            cursor = select(at, n, k)
        except sqlite3.Error:  # its first row: one it cannot hand back ("locked" is retried)
            return True
        try:
            prefetched, refused = stepped(cursor, prefetched, budget, got)
        finally:
            cursor.close()
        return refused

    while True:
        refused = step(first, count - len(got) if count >= 0 else -1, skip)
        if not refused or len(got) == count or (skip and not got):  # (skipping: from where?)
            return got, prefetched
        first = max(first, got[-1][-1] + 1) if got else first
        after = rowid_from(first)
        if after is None or after[0] >= 2**63 - 1:
            return got, prefetched
        first, skip, had = after[0] + 1, 0, len(got)
        if step(after[0], 1, 0):  # that row alone: refused too, it is the one passed over
            continue
        if len(got) == count or len(got) == had:  # full, or the budget spent
            return got, prefetched


def stepped(
    cursor: Iterable[tuple[Any, ...]], prefetched: int, budget: int, got: list[tuple[Any, ...]]
) -> tuple[int, bool]:
    """A chunk's rows stepped from `cursor` (`_PREFETCH_SELECT`) onto `got`, and the
    characters of the open bundle's prefetched values with theirs (`_chars`), while those
    stay within `budget`; a row SQLite cannot hand back (a value too long, text no UTF-8)
    stops it: whether one did is the second value returned."""
    try:
        for row in cursor:
            try:  # what `_chars` counts, in one call for a row of texts (then a number)
                chars = len(_EMPTY_JOIN(row[:11]))  # (a value no text raises: `_chars`)
                if type(row[11]) is not float or type(row[12]) is not int:
                    chars = _chars(row)
            except TypeError:
                chars = _chars(row)
            prefetched += chars
            if prefetched > budget:
                break
            got.append(row)
    except sqlite3.Error:
        return prefetched, True
    return prefetched, False


def _chars(row: tuple[object, ...]) -> int:
    """The characters of a prefetched row's values as Python holds them (a number counts as
    its text; a text's are never more than its bytes, which SQLite bounded)."""
    return sum(len(v) if isinstance(v, str | bytes) else len(str(v)) for v in row[:13])


def _components(text: str) -> dict[str, str]:
    """A row's components not as warm writes them (`_kernel_record` scans those in one
    call): a JSON object as `json.loads` reads it, each value as text; else `_Malformed`."""
    return {str(k): str(v) for k, v in _json_object(text, flat_json.loads).items()}


def _over_limit(row: tuple[object, ...]) -> str | None:
    """What `KERNEL_SELECT`'s last column says of a prefetched row: its first name over
    `MAX_NAME_CHARS` as SQLite's `length()` counts it (a text's characters before its
    first NUL, a blob's bytes; a number's is never that long), and that length."""
    for name, at in _NAMED_AT:
        value = row[at]
        if isinstance(value, str):
            nul = value.find("\x00")
            length = len(value) if nul < 0 else nul
        elif isinstance(value, bytes):
            length = len(value)
        else:
            continue
        if length > MAX_NAME_CHARS:
            return f"{name} {length}"
    return None


def _symbol_fits(key: str, arch: str, entry: str, symbol: str) -> bool:
    """Whether `symbol` (of warm's form) is the one warm gives `entry` built under `key`:
    `warm_<key[:16]>_<entry>`; a PTX row (arch `compute_XX`) keeps its cubin's symbol, so
    only its entry is tied. A row moved under another kernel's key (its blob and symbol
    those of another kernel) is malformed, never launched for the kernel the key names."""
    if arch[:8] == "compute_":  # its cubin's symbol: of warm's form, its entry
        return symbol == symbol_prefix(symbol[5:21]) + entry
    return symbol == symbol_prefix(key) + entry


def _checked_kernel_record(row: tuple[object, ...]) -> KernelRecord:
    if len(row) == 14 and type(row[13]) is int:  # prefetched: named as read by its key
        row = (*row[:13], _over_limit(row))
    fields_row = _within_limits(row)
    fields: dict[str, object] = {}
    name = "?"
    try:  # as `_named` for each field, in one frame: a hot start parses thousands of rows
        for (name, check), value in zip(_KERNEL_FIELDS, fields_row, strict=True):
            fields[name] = check(value)
    except _Malformed as exc:
        raise _Malformed(f"{name}: {exc}") from None
    key, arch, entry, symbol = (fields[n] for n in ("key", "arch", "entry", "symbol"))
    assert isinstance(key, str) and isinstance(arch, str) and isinstance(entry, str)
    if not _symbol_fits(key, arch, entry, str(symbol)):
        raise _Malformed(f"symbol: {symbol} is not the symbol of entry {entry} under key {key}")
    comps = fields["components"]
    assert isinstance(comps, dict)
    fields["components"] = texts = {str(k): str(v) for k, v in comps.items()}
    problem = _key_problem(key, arch, str(fields["toolchain"]), entry, str(symbol), texts)
    if problem:
        raise _Malformed(problem)
    return KernelRecord(**fields)  # type: ignore[arg-type]


def _key_problem(
    key: str, arch: str, toolchain: str, entry: str, symbol: str, components: dict[str, str]
) -> str | None:
    """What is wrong with a row's key (a PTX row's symbol) by the kernel its components
    name (`kernel`: its content hash; `headers`: their digest, as `kernel_key` keeps it),
    or with the arch, toolchain and entry they name, its own; None for a row without one
    (an older warm's)."""
    content = components.get("kernel")
    if content is None:
        return None
    if not _HEX64.fullmatch(content):
        return "components: kernel is not a sha256 in hex"
    for name, value in (("arch", arch), ("toolchain", toolchain), ("entry", entry)):
        if components.get(name) != value:
            return f"components: its {name} is not the row's"
    headers = components.get("headers", "")
    if headers and not _HEX64.fullmatch(headers):  # (hashed per arch below: never megabytes)
        return "components: headers is not a sha256 in hex"
    if key != key_of(content, arch, headers, toolchain):
        return f"key: not the key of kernel {content[:16]} built for {arch} by its toolchain"
    if arch[:8] == "compute_" and not _names_a_cubin(content, arch, headers, toolchain, symbol):
        return f"symbol: {symbol} is the symbol of no cubin of kernel {content[:16]}"
    return None


_RECENT = 8  # cubin archs that PTX rows' symbols named lately, tried after the PTX's own
_named: list[str] = []  # those archs, the latest first


@functools.lru_cache(maxsize=64)
def _archs(ptx_arch: str) -> tuple[str, ...]:
    return tuple(cubin_archs(ptx_arch))


def _names_a_cubin(content: str, arch: str, headers: str, toolchain: str, symbol: str) -> bool:
    """Whether a PTX row's symbol names a cubin of its kernel: its key for some SM of
    `cubin_archs` (the PTX's own first, then every other, ~570 key hashes). The PTX's own SM
    and the archs rows' symbols named lately are tried first (a bundle's PTX sits beside a
    cubin arch or two), then every SM, whatever rows came before: a row naming none (only a
    hostile or corrupt bundle has one) costs the whole search, ~0.25 ms, and every row's
    verdict is its own."""
    tag, archs = symbol[5:21], _archs(arch)
    for sm, key in arch_keys(content, (*archs[:3], *_named, *archs[3:]), headers, toolchain):
        if key[:16] == tag:
            if sm not in archs[:3]:  # the latest first (a list rebuilt whole: threads share it)
                _named[:] = [sm, *(n for n in _named if n != sm)][:_RECENT]
            return True
    return False
