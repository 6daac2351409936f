"""Tune rows read by the layout of their candidates: a listing of many tunes, with no
object made for each candidate (`warm stats --json` of a large bundle).

The tunes of one operation store documents of one arrangement (`warmcli.bundle.candidates`):
the same candidates, kernel ids, statuses, sample counts and reasons, only their times
differ. `laid_tunes` reads rows as `parsed_tunes` does, each row through the one parser
(`_tune_record`) until its document's arrangement is known: a `Layout`, learnt from a
document that parsed, passed every check and that `_parts` writes back byte for byte,
so its times lie where that says. A later row is a `LaidTune` (its fields, its layout
and its times, with no candidate made) only where everything the parser checks is known
to hold: its fields pass the same checks (`_plain`: types, sizes, its key against
them), its document inflates within bounds to the same length, with the same kernel ids,
the same tune status and pick, and the same bytes everywhere but its times, and its
times and their sum are finite (their magnitudes add up to under `BOUNDED_TIMES`) and
none is negative. Any
other row (a format before 3, a new arrangement, a time that is not small and finite, a
value over its limit) is read by `_tune_record`, which raises what it finds. So what is
read is what `parsed_tunes` reads, and every row is checked. At most `KEPT_LAYOUTS`
layouts of documents of at most `KEPT_BYTES` (inflated) naming at most `KEPT_IDS`
kernels in their head are kept, for one listing (its renderer keeps one template on
each, `Layout.memo`): nothing in a bundle sets the memory. It opens nothing, never
writes and never prints.
"""

from __future__ import annotations

import operator
import struct
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from warmcli.bundle.candidates import (
    KernelKey,
    Part,
    _inflate,
    _parts,
    interned,
    joined,
    kernel_ids,
)
from warmcli.bundle.oversize import each_named
from warmcli.bundle.rows import OnError, RowReader
from warmcli.bundle.tune_row import _plain, _tune_record
from warmcli.records import CandidateMeasurement, TuneRecord

KEPT_LAYOUTS = 256  # arrangements kept by one listing (more: the rest parsed one by one)
KEPT_BYTES = 4096  # a longer document (inflated) is parsed on its own, its layout never kept
KEPT_IDS = 64  # a longer head of kernel ids (its key, kept with a layout): the same
BOUNDED_TIMES = 1e300  # times whose magnitudes add up to less: every sum of them is finite
_Key = tuple[bytes, int, Any, Any]  # a document's head of ids, its length, status, pick


def _getter(indexes: list[int]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """The items at `indexes` of a tuple, as a tuple (`operator.itemgetter`, any count)."""
    if len(indexes) == 1:
        one = indexes[0]
        return lambda values: (values[one],)
    if not indexes:
        return lambda values: ()
    return operator.itemgetter(*indexes)  # type: ignore[return-value]


class Layout:
    """Where the times of one arrangement of a candidates document lie: `unpack` of a
    document of it gives every item, its fixed runs (`fixed` of it, `expected`) and its
    times (`times` of it); `candidates` are those of the document it was learnt from,
    `spans` where each candidate's median (None if it has none) and samples are in the
    times; `picked`: the candidate the tune's pick names (None: none). `memo` is its
    renderer's own (`warmcli.cli.render.tune_line`)."""

    __slots__ = ("candidates", "expected", "fixed", "memo", "picked", "spans", "times", "unpack")

    def __init__(
        self, parts: list[Part], candidates: tuple[CandidateMeasurement, ...], pick: Any
    ) -> None:
        layout, fixed, times, expected = ["<"], [], [], []
        for part in _runs(parts):
            at = len(fixed) + len(times)  # the place of this run's first item
            if type(part) is bytes:
                layout.append(f"{len(part)}s")
                fixed.append(at)
                expected.append(part)
            else:
                layout.append(f"{len(part)}d")
                times += range(at, at + len(part))
        self.unpack = struct.Struct("".join(layout)).unpack
        self.fixed, self.times = _getter(fixed), _getter(times)
        self.expected = tuple(expected)
        self.candidates = candidates
        self.spans = _spans(candidates)
        self.picked = next((i for i, c in enumerate(candidates) if c.name == pick), None)
        self.memo: Any = None

    def record(self, fields: tuple[Any, ...], times: tuple[float, ...]) -> TuneRecord:
        """The `TuneRecord` of a tune of this layout (what `_tune_record` makes of it)."""
        candidates = tuple(
            CandidateMeasurement(
                c.name,
                c.kernel_key,
                c.status,
                None if median is None else times[median],
                times[start:end],
                c.reason,
            )
            for c, (median, start, end) in zip(self.candidates, self.spans, strict=True)
        )
        key, operation, shape_key, device, checksum, status, pick, secs, measured_at = fields
        return TuneRecord(
            key, operation, shape_key, device, checksum, status, pick, candidates, secs, measured_at
        )


def _spans(candidates: tuple[CandidateMeasurement, ...]) -> list[tuple[int | None, int, int]]:
    """Where each candidate's median (or None) and samples lie in its document's times."""
    spans: list[tuple[int | None, int, int]] = []
    at = 0
    for c in candidates:
        median = None
        if c.seconds is not None:
            median, at = at, at + 1
        spans.append((median, at, at + len(c.samples)))
        at += len(c.samples)
    return spans


class LaidTune:
    """A tune read by its layout: its fields (a `TuneRecord`'s, without candidates), its
    `Layout` and its document's times; `record()` is its `TuneRecord`."""

    __slots__ = ("fields", "layout", "times")

    def __init__(self, fields: tuple[Any, ...], layout: Layout, times: tuple[float, ...]) -> None:
        self.fields, self.layout, self.times = fields, layout, times

    def record(self) -> TuneRecord:
        return self.layout.record(self.fields, self.times)


def bounded(times: Iterable[float]) -> bool:
    """Whether every time is finite and their magnitudes add up to under `BOUNDED_TIMES`."""
    return sum(map(abs, times)) < BOUNDED_TIMES  # a NaN or an infinity: not less


class _Reader:
    """One listing's rows, read by layout where it can (see the module doc)."""

    def __init__(self, kernel_key: KernelKey, samples: bool) -> None:
        self.kernel_key, self.samples = kernel_key, samples
        self.layouts: dict[_Key, Layout] = {}

    def tune(self, row: tuple[Any, ...]) -> LaidTune | TuneRecord:
        key, operation, shape_key, device, checksum, status, pick, cands, secs, at, over = row
        fields = (key, operation, shape_key, device, checksum, status, pick, secs, at)
        if over is not None or not interned(cands) or not _plain(*fields):
            return _tune_record(row, self.kernel_key, self.samples)
        start = 5 + 4 * int.from_bytes(cands[1:5], "little")  # its fields, after its head of ids
        try:
            if start > len(cands):
                raise ValueError("cut short")
            raw = _inflate(cands, start)
        except ValueError:
            return _tune_record(row, self.kernel_key, self.samples)  # it says why
        found = (cands[:start], len(raw), status, pick)
        layout = self.layouts.get(found)
        if layout is not None:
            values = layout.unpack(raw)
            if layout.fixed(values) == layout.expected:
                times = layout.times(values)
                if min(times, default=0.0) >= 0 and sum(times) < BOUNDED_TIMES:  # so `bounded`
                    return LaidTune(fields, layout, times)
        record = _tune_record(row, self.kernel_key, self.samples or len(raw) <= KEPT_BYTES)
        if (
            layout is None
            and len(self.layouts) < KEPT_LAYOUTS
            and len(raw) <= KEPT_BYTES
            and start <= 5 + 4 * KEPT_IDS
        ):
            self._learn(found, record, raw)
        return record

    def _learn(self, found: _Key, record: TuneRecord, raw: bytes) -> None:
        """Keep the layout of `record`'s document where `_parts` writes it back exactly."""
        local = _local(found[0], self.kernel_key)
        try:
            parts = _parts(record.candidates, local.__getitem__)
        except (KeyError, ValueError):  # a kernel its head does not name: never laid out
            return
        if joined(parts) == raw:
            self.layouts[found] = Layout(parts, record.candidates, record.pick)


def _local(head: bytes, kernel_key: KernelKey) -> dict[bytes, int]:
    """Each kernel key's (32 bytes) first place in a document's head of ids."""
    local: dict[bytes, int] = {}
    for i, kernel in enumerate(kernel_ids(head)[0]):
        local.setdefault(bytes.fromhex(kernel_key(kernel)), i)
    return local


def _runs(parts: list[Part]) -> Iterator[Part]:
    """`parts` with neighbouring bytes joined: fewer items to unpack and compare."""
    held: list[bytes] = []
    for part in parts:
        if type(part) is bytes:
            held.append(part)
            continue
        if held:
            yield b"".join(held)
            held = []
        yield part
    if held:
        yield b"".join(held)


def laid_tunes(
    reader: RowReader,
    rows: Iterable[tuple[Any, ...]],
    on_error: OnError | None,
    samples: bool = True,
) -> Iterator[LaidTune | TuneRecord]:
    """The tunes of `rows` (`TUNE_SELECT`'s, read by `reader`) as `parsed_tunes` reads
    them, each a `LaidTune` where its layout is known, else a `TuneRecord` (see the
    module doc); a row that is not what warm writes is a `BundleError` naming it, or
    given to `on_error`. Without `samples` (checks only: `warm verify`), a record of a
    document past `KEPT_BYTES` is read as a serving process reads it (`_tune_record`'s
    `samples`: checked alike, no sample made)."""
    reading = _Reader(reader._kernel_key, samples)
    return each_named(reader, "tune", reading.tune, rows, on_error)
