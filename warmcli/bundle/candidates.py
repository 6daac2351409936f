"""A tune's candidates as a bundle stores them (format 2): one compact binary document.

`pack` writes every candidate of a `TuneRecord` (name, kernel key, status, median
and every sample, reason) as little-endian fields: counts and lengths as uint32,
times as float64 (every sample kept exactly, never rounded), a kernel key that is a
sha256 in hex as its 32 bytes; the document is stored deflated when that is
shorter (a leading tag byte says which). `unpack` reads it back as untrusted input:
the inflated size is bounded (`MAX_PACKED_BYTES`, so no size in a bundle sets
warm's memory), every count and length is checked against the bytes that remain
before anything is read, and anything that is not what `pack` writes is a
`ValueError` (the row reader names it as a corrupt entry). Format 1 stored the same
candidates as JSON text (`TuneRecord.candidates_json`), which `decode` still reads.
This module owns no state and never touches a file.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterable

from warmcli.records import CandidateMeasurement, TuneRecord

MAX_PACKED_BYTES = 4 << 20  # a document inflating past this is refused, not read
RAW, DEFLATED = 0, 1  # the tag byte
_STATUSES = ("ok", "failed", "pending")  # codes 0..2; code 3: the status's text follows
_SECONDS, _HEX_KEY, _STATUS_SHIFT = 1, 2, 2
_U32, _F64, _FLAGS = struct.Struct("<I"), struct.Struct("<d"), struct.Struct("<B")
_HEX = frozenset("0123456789abcdef")


def _text(value: str) -> bytes:
    raw = value.encode("utf-8", "surrogatepass")
    return _U32.pack(len(raw)) + raw


def pack(candidates: Iterable[CandidateMeasurement]) -> bytes:
    """The stored form of `candidates` (see the module doc)."""
    items = tuple(candidates)
    parts = [_U32.pack(len(items))]
    for c in items:
        hex_key = len(c.kernel_key) == 64 and _HEX.issuperset(c.kernel_key)
        code = _STATUSES.index(c.status) if c.status in _STATUSES else len(_STATUSES)
        flags = (_SECONDS if c.seconds is not None else 0) | (_HEX_KEY if hex_key else 0)
        parts += (_FLAGS.pack(flags | code << _STATUS_SHIFT), _text(c.name))
        parts.append(bytes.fromhex(c.kernel_key) if hex_key else _text(c.kernel_key))
        if code == len(_STATUSES):
            parts.append(_text(c.status))
        if c.seconds is not None:
            parts.append(_F64.pack(c.seconds))
        parts += (_U32.pack(len(c.samples)), struct.pack(f"<{len(c.samples)}d", *c.samples))
        parts.append(_text(c.reason))
    raw = b"".join(parts)
    deflated = zlib.compress(raw, 6)
    if len(deflated) < len(raw):
        return bytes((DEFLATED,)) + deflated
    return bytes((RAW,)) + raw


def _inflate(data: bytes) -> bytes:
    if not data:
        raise ValueError("an empty document")
    if data[0] == RAW:
        return data[1:]
    if data[0] != DEFLATED:
        raise ValueError(f"tag {data[0]} is not a candidates encoding")
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(data[1:], MAX_PACKED_BYTES)
    except zlib.error as exc:
        raise ValueError(f"not deflated ({exc})") from None
    if inflater.unconsumed_tail or not inflater.eof:
        raise ValueError(f"over {MAX_PACKED_BYTES} bytes inflated, or cut short")
    return raw


def decode(value: object) -> tuple[CandidateMeasurement, ...]:
    """A tune's candidates as a bundle holds them: packed (format 2), or JSON text (format
    1, as `TuneRecord.candidates_json` wrote it); `ValueError` if neither."""
    if isinstance(value, bytes):
        return unpack(value)
    if not isinstance(value, str):
        raise ValueError(f"a {type(value).__name__}, neither packed nor text")
    try:
        return TuneRecord.candidates_from(json.loads(value))
    except RecursionError:
        raise ValueError("JSON nested too deep") from None


def _text_at(raw: bytes, at: int) -> tuple[str, int]:
    """The text at `at` (its uint32 length first) and where the next field starts."""
    (size,) = _U32.unpack_from(raw, at)
    end = at + 4 + size
    if end > len(raw):
        raise ValueError("cut short")
    return raw[at + 4 : end].decode("utf-8", "surrogatepass"), end


def unpack(data: bytes) -> tuple[CandidateMeasurement, ...]:
    """The candidates `pack` stored in `data`; `ValueError` if it is not what `pack` writes."""
    raw = _inflate(bytes(data))
    out = []
    try:  # one frame, few calls: a stats or verify of 100,000 tunes unpacks them all
        (count,) = _U32.unpack_from(raw, 0)
        at = 4
        for _ in range(count):
            flags = raw[at]  # an IndexError past the end
            code = flags >> _STATUS_SHIFT
            if code > len(_STATUSES) or flags & ~(_SECONDS | _HEX_KEY | 3 << _STATUS_SHIFT):
                raise ValueError(f"flags {flags:#x} are not a candidate's")
            name, at = _text_at(raw, at + 1)
            if flags & _HEX_KEY:
                kernel_key, at = raw[at : at + 32].hex(), at + 32
            else:
                kernel_key, at = _text_at(raw, at)
            status, at = (_STATUSES[code], at) if code < len(_STATUSES) else _text_at(raw, at)
            seconds = None
            if flags & _SECONDS:
                (seconds,) = _F64.unpack_from(raw, at)
                at += 8
            (n,) = _U32.unpack_from(raw, at)
            if n > (len(raw) - at - 4) // 8:
                raise ValueError("cut short")
            samples = struct.unpack_from(f"<{n}d", raw, at + 4)
            reason, at = _text_at(raw, at + 4 + 8 * n)
            out.append(CandidateMeasurement(name, kernel_key, status, seconds, samples, reason))
    except (struct.error, IndexError):
        raise ValueError("cut short") from None
    if at != len(raw):
        raise ValueError(f"{len(raw) - at} bytes after the last candidate")
    return tuple(out)
