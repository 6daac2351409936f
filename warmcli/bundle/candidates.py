"""A tune's candidates as a bundle stores them: one compact binary document.

`pack` writes every candidate of a `TuneRecord` (name, kernel key, status, median
and every sample, reason: cut, head and tail kept, where the document would not fit
`MAX_PACKED_BYTES`, as an exception's message of megabytes would not) as little-endian
fields: counts and lengths as uint32, times as float64 (every sample kept exactly,
never rounded). A kernel key that is a
sha256 in hex is written as its 32 bytes (format 2), or, given `intern` (format 3),
as its index in the document's head: the uint32 ids under which the bundle holds
each kernel's 32 bytes once (`tune_kernels`: a tune's candidates name the same few
kernels as thousands of others). The fields are stored deflated when that is
shorter and it keeps at most one candidate a stored byte (format 3: raw deflate, no
zlib header; its head of ids never deflated); a leading tag byte says which form.
`signed_form` is what a signature covers of a format-3 document: it, and the kernel
keys its ids stand for, read from the head without inflating anything. `unpack` reads
every form back as untrusted input (an id through `kernel_key`):
the inflated size is bounded (`MAX_PACKED_BYTES`, so no size in a bundle sets
warm's memory), as is the count of candidates (at most the document's stored bytes,
`_counted`: read before the rest is inflated, so decoding costs in proportion to the
bundle's size, not to what its rows say), every count and length is checked against
the bytes that remain before anything is read, and anything that is not what `pack` writes is a
`ValueError` (the row reader names it as a corrupt entry); a serving read
(`unpack(..., samples=False)`) makes no sample and keeps no reason. Format 1 stored the same
candidates as JSON text (`TuneRecord.candidates_json`), which `decode` still reads (a long one
opening more lists and objects than warm writes is refused unparsed: `flat_json.dense`).
`_parts` is a document's fields as `pack` writes them, its times apart (where they lie:
`warmcli.bundle.tune_layout`).
Its only state is two memos of struct layouts, for counts up to 256 (`_SAMPLES`, `_IDS`:
a larger count, a hostile one, is never kept); it never touches a file.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import TypeGuard

from warmcli.bundle import flat_json
from warmcli.records import CandidateMeasurement, TuneRecord

MAX_PACKED_BYTES = 4 << 20  # a document inflating past this is refused, not read
RAW, DEFLATED = 0, 1  # the tag byte of format 2: kernel keys whole
INTERNED, INTERNED_DEFLATED = 2, 3  # format 3: kernel keys as ids, raw deflate
_FIRST = 64 << 10  # bytes inflated before a document's count of candidates is checked
_RAW_DEFLATE = -15  # zlib's window bits for a raw deflate stream (no header, no checksum)
_STATUSES = ("ok", "failed", "pending")  # codes 0..2; code 3: the status's text follows
_SECONDS, _HEX_KEY, _STATUS_SHIFT = 1, 2, 2
_U32, _F64, _FLAGS = struct.Struct("<I"), struct.Struct("<d"), struct.Struct("<B")
_HEAD = struct.Struct("<BI")  # a candidate's flags and its name's length
_ID_TIME_COUNT = struct.Struct("<IdI")  # its kernel's id, median and count of samples
_MEASURED = frozenset(_HEX_KEY | _SECONDS | code << _STATUS_SHIFT for code in range(3))
_FLAG_BITS = _SECONDS | _HEX_KEY | 3 << _STATUS_SHIFT
_SAMPLES: dict[int, struct.Struct] = {}  # the layout of n samples (`_samples`), made once each
_IDS: dict[int, struct.Struct] = {}  # the layout of a head of n kernel ids, made once each
_KEPT_SAMPLES = 256
_SMALL_TIME = 2.0**993  # a time below this, summed with 2^19 others (4 MiB), stays finite
_SMALL_HIGH = bytes(range(0x7E))  # the high bytes of the float64s in [0, 2^993)
_HEX = frozenset("0123456789abcdef")
Intern = Callable[[bytes], int]  # a kernel key's 32 bytes -> the id the bundle holds it under
KernelKey = Callable[[int], str]  # an id -> the kernel key (hex) it stands for; ValueError if none
Part = bytes | tuple[float, ...]  # a run of a document's fields (`_parts`): bytes, or times


def is_hex64(text: object) -> TypeGuard[str]:
    """Whether `text` is a sha256 in hex, as warm writes one (64 lower-case hex digits)."""
    return isinstance(text, str) and len(text) == 64 and _HEX.issuperset(text)


def as_bytes(text: object) -> object:
    """A sha256 in hex as its 32 bytes (as format 3 stores keys); anything else as it is."""
    return bytes.fromhex(text) if is_hex64(text) else text


def _text(value: str) -> bytes:
    raw = value.encode("utf-8", "surrogatepass")
    return _U32.pack(len(raw)) + raw


def _parts(items: tuple[CandidateMeasurement, ...], index: Intern | None) -> list[Part]:
    """The fields of `items` in order: bytes, or a tuple of times where times go (each a
    float64); a kernel key in hex as its 32 bytes, or as `index` of them. `_encode` joins
    them; `warmcli.bundle.tune_layout` reads where the times of a document lie from them."""
    return list(_each_part(items, index))


def _each_part(items: tuple[CandidateMeasurement, ...], index: Intern | None) -> Iterator[Part]:
    """`_parts`, one at a time."""
    yield _U32.pack(len(items))
    for c in items:
        hex_key = is_hex64(c.kernel_key)
        code = _STATUSES.index(c.status) if c.status in _STATUSES else len(_STATUSES)
        flags = (_SECONDS if c.seconds is not None else 0) | (_HEX_KEY if hex_key else 0)
        yield _FLAGS.pack(flags | code << _STATUS_SHIFT)
        yield _text(c.name)
        if not hex_key:
            yield _text(c.kernel_key)
        elif index is None:
            yield bytes.fromhex(c.kernel_key)
        else:
            yield _U32.pack(index(bytes.fromhex(c.kernel_key)))
        if code == len(_STATUSES):
            yield _text(c.status)
        if c.seconds is not None:
            yield (c.seconds,)
        yield _U32.pack(len(c.samples))
        yield tuple(c.samples)
        yield _text(c.reason)


def _encode(items: tuple[CandidateMeasurement, ...], index: Intern | None) -> bytes:
    """The fields of `items` as `_parts` has them, times packed: made as they come, never
    held as parts (seven objects a candidate, and a tune may hold 200,000 candidates)."""
    out = bytearray()
    for p in _each_part(items, index):
        out += p if type(p) is bytes else struct.pack(f"<{len(p)}d", *p)
    return bytes(out)


def joined(parts: Iterable[Part]) -> bytes:
    """A document's fields from its `_parts`, times packed (float64 each)."""
    return b"".join(p if type(p) is bytes else struct.pack(f"<{len(p)}d", *p) for p in parts)


def pack(candidates: Iterable[CandidateMeasurement], intern: Intern | None = None) -> bytes:
    """The stored form of `candidates`: format 3's with `intern` (a kernel key's 32 bytes
    to the id the bundle holds them under), else format 2's (see the module doc)."""
    items = _fitted(tuple(candidates))
    if intern is None:
        raw = _encode(items, None)
        deflated, tags, head = zlib.compress(raw, 6), (RAW, DEFLATED), b""
    else:
        local: dict[bytes, int] = {}  # this tune's kernels, in the order it names them
        raw = _encode(items, lambda key: local.setdefault(key, len(local)))
        ids = [intern(key) for key in local]
        head = _U32.pack(len(ids)) + struct.pack(f"<{len(ids)}I", *ids)
        packer = zlib.compressobj(9, zlib.DEFLATED, _RAW_DEFLATE)
        deflated, tags = packer.compress(raw) + packer.flush(), (INTERNED, INTERNED_DEFLATED)
    if len(deflated) < len(raw) and len(items) <= 1 + len(head) + len(deflated):
        return bytes((tags[1],)) + head + deflated  # (else refused: `_counted`)
    return bytes((tags[0],)) + head + raw


def _fitted(items: tuple[CandidateMeasurement, ...]) -> tuple[CandidateMeasurement, ...]:
    """`items` with their reasons cut (head and tail kept) so that the document fits in
    `MAX_PACKED_BYTES` (a reason is an exception's message: it may be megabytes); the
    samples and names, which `Tunable` bounds, are kept whole."""
    rough = sum(4 * len(c.reason) + 8 * len(c.samples) + 4 * len(c.name) + 128 for c in items)
    if rough <= MAX_PACKED_BYTES:  # nearly every tune: not encoded twice
        return items
    sizes = [len(c.reason.encode("utf-8", "surrogatepass")) for c in items]
    spare = MAX_PACKED_BYTES - 4096 - (len(_encode(items, None)) - sum(sizes))
    long = [n for n in sizes if n > 0]
    if sum(sizes) <= spare or not long:
        return items
    each = max(spare, 0) // len(long) // 4  # characters, at most 4 bytes each in UTF-8
    return tuple(
        c
        if len(c.reason) <= each
        else CandidateMeasurement(
            c.name, c.kernel_key, c.status, c.seconds, c.samples, _cut(c.reason, each)
        )
        for c in items
    )


def _cut(text: str, chars: int) -> str:
    """`text` as at most about `chars` characters: its head and tail, the middle counted."""
    half = max(chars // 2 - 32, 0)
    head, tail = text[:half], text[len(text) - half :]
    return f"{head}\n[... {len(text) - 2 * half} characters cut ...]\n{tail}"


def interned(value: object) -> bool:
    """Whether a stored candidates value names its kernels by ids (format 3)."""
    return isinstance(value, bytes) and value[:1] in (b"\x02", b"\x03")


def kernel_ids(data: bytes) -> tuple[tuple[int, ...], int]:
    """The ids a format-3 document names its kernels by, and where its fields start."""
    if len(data) < 5:
        raise ValueError("cut short")
    (n,) = _U32.unpack_from(data, 1)
    if n > (len(data) - 5) // 4:
        raise ValueError("cut short")
    layout = _IDS.get(n)
    if layout is None:
        layout = struct.Struct(f"<{n}I")
        if n <= _KEPT_SAMPLES:  # a hostile count is read once, never kept
            _IDS[n] = layout
    return layout.unpack_from(data, 5), 5 + 4 * n


def signed_form(data: bytes, kernel_key: KernelKey) -> bytes:
    """What a signature covers of a format-3 document: it, then the 32 bytes of each kernel
    key its ids stand for (so a signed tune names its kernels, not their ids)."""
    ids, _ = kernel_ids(data)
    return data + b"".join(bytes.fromhex(kernel_key(i)) for i in ids)


def _inflate(data: bytes, at: int = 1) -> bytes:
    """The fields of a document whose tag is `data[0]` and whose fields start at `at`."""
    if not data:
        raise ValueError("an empty document")
    if data[0] in (RAW, INTERNED):
        return _counted(data[at:], len(data))
    if data[0] not in (DEFLATED, INTERNED_DEFLATED):
        raise ValueError(f"tag {data[0]} is not a candidates encoding")
    inflater = zlib.decompressobj(zlib.MAX_WBITS if data[0] == DEFLATED else _RAW_DEFLATE)
    try:  # its count first: a count past the rule is refused with no more than 64 KiB inflated
        raw = _counted(inflater.decompress(data[at:], _FIRST), len(data))
        if not inflater.eof:  # (nearly every tune is inflated whole by then)
            raw += inflater.decompress(inflater.unconsumed_tail, MAX_PACKED_BYTES - len(raw))
    except zlib.error as exc:
        if "Error -4 " in str(exc):  # Z_MEM_ERROR: zlib ran out of memory, the data is not bad
            raise MemoryError(str(exc)) from None
        raise ValueError(f"not deflated ({exc})") from None
    if inflater.unconsumed_tail or not inflater.eof or inflater.unused_data:
        raise ValueError(f"over {MAX_PACKED_BYTES} bytes inflated, or cut short")
    return raw


def _counted(raw: bytes, stored: int) -> bytes:
    """`raw`, a document's fields; `ValueError` where their count of candidates (its first
    4 bytes) is more than the `stored` bytes of the document (`pack` never writes that:
    its own run at most 0.6 a byte, so a row's decoding is bounded by its size)."""
    count = _U32.unpack_from(raw)[0] if len(raw) >= 4 else 0
    if count > stored:
        raise ValueError(
            f"{count:,} candidates in {stored:,} bytes (warm writes one a byte at most)"
        )
    return raw


def decode(value: object, kernel_key: KernelKey | None = None) -> tuple[CandidateMeasurement, ...]:
    """A tune's candidates as a bundle holds them: packed (formats 2 and 3; an interned
    kernel key's id read through `kernel_key`), or JSON text (format 1, as
    `TuneRecord.candidates_json` wrote it: refused where they would pack past
    `MAX_PACKED_BYTES`, as a packed document inflating past it is, `_packable`);
    `ValueError` if none of these."""
    if isinstance(value, bytes):
        return unpack(value, kernel_key)
    if not isinstance(value, str):
        raise ValueError(f"a {type(value).__name__}, neither packed nor text")
    if flat_json.dense(value):  # its lists and objects would cost ~50x its text parsed
        raise ValueError("more lists and objects than warm writes (not parsed)")
    try:
        return _packable(TuneRecord.candidates_from(json.loads(value)))
    except RecursionError:
        raise ValueError("JSON nested too deep") from None


def _packable(items: tuple[CandidateMeasurement, ...]) -> tuple[CandidateMeasurement, ...]:
    """`items`, read from JSON text; `ValueError` where `pack` would write a document
    inflating past `MAX_PACKED_BYTES` (600,000 samples "0" are 1.2 MB of text, 4.8 MB
    packed: read as sound, a merge or migration wrote what every reader refuses)."""
    rough = sum(8 * len(c.samples) + 4 * len(c.name + c.kernel_key + c.status) + 64 for c in items)
    over = rough > MAX_PACKED_BYTES - 8192  # (nearly every tune: not encoded)
    if over and len(_encode(_fitted(items), lambda _: 0)) > MAX_PACKED_BYTES:
        raise ValueError(f"over {MAX_PACKED_BYTES} bytes packed")
    return items


def _text_at(raw: bytes, at: int) -> tuple[str, int]:
    """The text at `at` (its uint32 length first) and where the next field starts."""
    (size,) = _U32.unpack_from(raw, at)
    end = at + 4 + size
    if end > len(raw):
        raise ValueError("cut short")
    return raw[at + 4 : end].decode("utf-8", "surrogatepass"), end


def _samples(n: int) -> struct.Struct:
    """`n` samples and the uint32 after them (the reason's length), read as one."""
    layout = struct.Struct(f"<{n}dI")
    if n <= _KEPT_SAMPLES:  # a hostile count is read once, never kept
        _SAMPLES[n] = layout
    return layout


def _middle(
    raw: bytes, at: int, flags: int, keys: list[str] | None
) -> tuple[str, str, float | None, int, int]:
    """A candidate's fields between its name and its samples, as any flags say: its kernel
    key, status, median (or None) and count of samples, and where its samples start."""
    if not flags & _HEX_KEY:
        key, at = _text_at(raw, at)
    elif keys is not None:
        (local,) = _U32.unpack_from(raw, at)
        if local >= len(keys):
            raise ValueError(f"kernel {local} of {len(keys)}")
        key, at = keys[local], at + 4
    else:
        if at + 32 > len(raw):
            raise ValueError("cut short")
        key, at = raw[at : at + 32].hex(), at + 32
    code = flags >> _STATUS_SHIFT
    status, at = (_STATUSES[code], at) if code < len(_STATUSES) else _text_at(raw, at)
    seconds = None
    if flags & _SECONDS:
        (seconds,) = _F64.unpack_from(raw, at)
        at += 8
    (n,) = _U32.unpack_from(raw, at)
    return key, status, seconds, n, at + 4


def _small_times(raw: bytes, at: int, n: int, seconds: float | None) -> bool:
    """Whether the `n` samples at `at` are each below 2^993 with their sign clear (the high
    byte of each, < 0x7E, read at C speed: no float made) and `seconds` is below 2^993 too:
    then every time is finite and not negative, and so is their sum (at most 2^19 of them)."""
    if seconds is not None and not seconds < _SMALL_TIME:  # (a NaN: not less)
        return False
    return not raw[at + 7 : at + 8 * n : 8].translate(None, _SMALL_HIGH)


def unpack(
    data: bytes, kernel_key: KernelKey | None = None, samples: bool = True
) -> tuple[CandidateMeasurement, ...]:
    """The candidates `pack` stored in `data` (an interned kernel key's id read through
    `kernel_key`); `ValueError` if it is not what `pack` writes. Without `samples` (what a
    serving process reads) each candidate holds no samples and no reason: both are read
    as bytes, where they lie and whether the reason is text, and the samples are handed
    back only where `_small_times` cannot vouch for them (so the reader's checks of them,
    `warmcli.bundle.tune_row`, decide as they would), never for a row warm writes."""
    data = bytes(data)
    keys: list[str] | None = None
    if interned(data):
        if kernel_key is None:
            raise ValueError("kernel keys by id, where the bundle holds none")
        ids, at = kernel_ids(data)
        keys = list(map(kernel_key, ids))
        raw = _inflate(data, at)
    else:
        raw = _inflate(data)
    out = []
    end = len(raw)
    kept = len(keys) if keys is not None else 0
    try:  # one frame, few reads: a stats or verify of 100,000 tunes unpacks them all
        (count,) = _U32.unpack_from(raw, 0)
        at = 4
        for _ in range(count):
            flags, size = _HEAD.unpack_from(raw, at)
            if flags & ~_FLAG_BITS:
                raise ValueError(f"flags {flags:#x} are not a candidate's")
            at += 5 + size
            if at > end:
                raise ValueError("cut short")
            name = raw[at - size : at].decode("utf-8", "surrogatepass")
            if flags in _MEASURED and kept and at + 16 <= end:  # as format 3 writes most
                local, seconds, n = _ID_TIME_COUNT.unpack_from(raw, at)
                if local >= kept:
                    raise ValueError(f"kernel {local} of {kept}")
                key, status, at = keys[local], _STATUSES[flags >> _STATUS_SHIFT], at + 16  # type: ignore[index]
            else:
                key, status, seconds, n, at = _middle(raw, at, flags, keys)
            if n > (end - at) // 8:
                raise ValueError("cut short")
            if samples or not _small_times(raw, at, n, seconds):
                values = (_SAMPLES.get(n) or _samples(n)).unpack_from(raw, at)
                size, times = values[n], values[:n]
            else:
                (size,), times = _U32.unpack_from(raw, at + 8 * n), ()
            at += 8 * n + 4
            if size:
                at += size
                if at > end:
                    raise ValueError("cut short")
                reason = raw[at - size : at].decode("utf-8", "surrogatepass")
            else:
                reason = ""
            out.append(
                CandidateMeasurement(name, key, status, seconds, times, reason if samples else "")
            )
    except (struct.error, IndexError):
        raise ValueError("cut short") from None
    if at != end:
        raise ValueError(f"{end - at} bytes after the last candidate")
    return tuple(out)
