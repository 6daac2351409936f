"""Tunes read by the layout of their candidates (`laid_tunes`) are the tunes the one parser
reads (`parsed_tunes`), written as the same JSON lines, and a row it must refuse (a time
not finite, a document changed anywhere but its times, a field not what warm writes)
is refused with the same words, where the parser refuses it."""

from __future__ import annotations

import math
import random
import sqlite3
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from warmcli.bundle import tune_layout
from warmcli.bundle.candidates import INTERNED_DEFLATED, kernel_ids
from warmcli.bundle.store import Bundle
from warmcli.bundle.tune_layout import LaidTune, laid_tunes
from warmcli.bundle.tune_row import TUNE_SELECT, parsed_tunes
from warmcli.cli.render.tune_line import LINES_APART, tune_lines
from warmcli.errors import BundleError
from warmcli.records import CandidateMeasurement, TuneRecord, tune_key

DEVICE = "cuda|NVIDIA H200|sm_90|570"
_SQL = f"{TUNE_SELECT} ORDER BY operation, shape_key"


def _kernel(i: int) -> str:
    return f"{i:064x}"


def _candidates(rng: random.Random, kind: int) -> tuple[tuple[CandidateMeasurement, ...], Any]:
    """Candidates of one of a few arrangements (the same names, kernels, counts) with times
    of their own, and the pick."""
    times = [1e-4 * (1 + rng.random()) for _ in range(4)]
    if kind == 0:  # samples of their own, a failed candidate, a reason with % and quotes
        cands = (
            CandidateMeasurement("a", _kernel(1), "ok", times[0], tuple(times)),
            CandidateMeasurement("b%s", _kernel(2), "ok", times[1], (times[1],) * 3),
            CandidateMeasurement("c", _kernel(3), "failed", None, (), 'bad "launch" 100%'),
        )
        return cands, "b%s"
    if kind == 1:  # two kernels alike, names not ASCII
        cands = (
            CandidateMeasurement("naïve ☃", _kernel(4), "ok", times[0], (times[0], times[2])),
            CandidateMeasurement("tiled", _kernel(4), "ok", times[1], (times[1], times[3])),
        )
        return cands, "tiled"
    if kind == 2:  # a pick with no median: no ratios
        cands = (
            CandidateMeasurement("p", _kernel(5), "ok", None, (times[0],)),
            CandidateMeasurement("q", _kernel(6), "ok", times[1], ()),
        )
        return cands, "p"
    cands = (  # pending: no pick
        CandidateMeasurement("x", _kernel(7), "pending", None, ()),
        CandidateMeasurement("y", _kernel(8), "ok", times[0], (times[0], -0.0, 0.0)),
    )
    return cands, None


def _tunes(count: int, seed: int = 0) -> Iterator[TuneRecord]:
    rng = random.Random(seed)
    for i in range(count):
        kind = i % 4
        cands, pick = _candidates(rng, kind)
        op, shape, checksum = f"op{kind}", f"float32[{i}]", f"{kind:064x}"
        status = "pending" if pick is None else "measured"
        key = tune_key(op, shape, DEVICE, checksum)
        yield TuneRecord(key, op, shape, DEVICE, checksum, status, pick, cands, 0.5, 1e9 + i)


@pytest.fixture()
def bundle_path(tmp_path: Path) -> Path:
    path = tmp_path / "b.warm"
    with Bundle.create(path) as bundle:
        bundle.put(tunes=list(_tunes(200)))
    return path


def _both(path: Path) -> tuple[list[Any], list[TuneRecord]]:
    with Bundle.open(path) as bundle:
        laid = list(laid_tunes(bundle, bundle._iter(_SQL), None))
        parsed = list(parsed_tunes(bundle, bundle._iter(_SQL), None))
    return laid, parsed


def test_laid_tunes_are_the_parsed_tunes_and_their_lines(bundle_path: Path) -> None:
    laid, parsed = _both(bundle_path)
    assert sum(type(t) is LaidTune for t in laid) > 180  # most read by their layout
    assert [t.record() if type(t) is LaidTune else t for t in laid] == parsed
    assert tune_lines(laid).split(LINES_APART) == tune_lines(parsed).split(LINES_APART)


def _rewrite(path: Path, rowid: int, change: Any) -> None:
    """Change the inflated fields of one row's candidates with `change(fields) -> fields`."""
    with sqlite3.connect(path) as conn:
        (data,) = conn.execute("SELECT candidates FROM tunes WHERE rowid = ?", (rowid,)).fetchone()
        _, start = kernel_ids(data)
        raw = data[start:]
        if data[0] == INTERNED_DEFLATED:
            raw = zlib.decompress(raw, -15)
        raw = change(bytearray(raw))
        packer = zlib.compressobj(9, zlib.DEFLATED, -15)
        packed = bytes((INTERNED_DEFLATED,)) + data[1:start] + packer.compress(raw) + packer.flush()
        conn.execute("UPDATE tunes SET candidates = ? WHERE rowid = ?", (packed, rowid))
    conn.close()


def _at_median(value: float, sample: float | None = None) -> Any:
    """A change setting the first candidate's median (kind 0's layout) to `value`, and its
    first sample to `sample`, if given."""

    def change(raw: bytearray) -> bytearray:
        at = 4 + 1 + 4 + 1 + 4  # count, flags, the name's length, the name, its kernel id
        raw[at : at + 8] = struct.pack("<d", value)
        if sample is not None:  # after the median and the count of samples
            raw[at + 12 : at + 20] = struct.pack("<d", sample)
        return raw

    return change


def _rename(raw: bytearray) -> bytearray:
    raw[9:10] = b"z"  # the first candidate's name: another document, just as sound
    return raw


def _count(raw: bytearray) -> bytearray:
    raw[0] += 1  # one more candidate than it holds: cut short
    return raw


@pytest.mark.parametrize(
    ("change", "refused"),
    [
        (_at_median(math.inf), True),
        (_at_median(math.nan), True),
        (_at_median(1.7e308, 1.7e308), True),  # each finite, their sum not
        (_at_median(1e305, 1e305), False),  # large, and finite: the parser's to read
        (_at_median(-0.0), False),
        (_at_median(-1e-4), True),  # no time is negative
        (_at_median(1e-4, -5e-324), True),
        (_rename, False),
        (_count, True),
    ],
    ids=[
        "infinite",
        "nan",
        "overflowing sum",
        "large",
        "negative zero",
        "negative",
        "negative sample",
        "renamed",
        "count",
    ],
)
def test_a_row_the_parser_refuses_is_refused_alike(
    bundle_path: Path, change: Any, refused: bool
) -> None:
    with Bundle.open(bundle_path) as bundle:
        rowid = bundle._one("SELECT rowid FROM tunes WHERE operation = 'op0' LIMIT 1 OFFSET 30")
    assert rowid is not None
    _rewrite(bundle_path, rowid[0], change)
    got = {}
    with Bundle.open(bundle_path) as bundle:
        for name, read in (("laid", laid_tunes), ("parsed", parsed_tunes)):
            problems: list[str] = []
            listed = list(
                read(bundle, bundle._iter(_SQL), lambda _k, p, found=problems: found.append(p))
            )
            try:
                lines = tune_lines(read(bundle, bundle._iter(_SQL), None))
            except BundleError as exc:
                lines = str(exc)
            got[name] = (lines, problems, len(listed))
    assert got["laid"] == got["parsed"]
    assert got["laid"][2] == (199 if refused else 200)


def test_a_huge_ratio_and_a_zero_pick_are_written_as_json_writes_them(tmp_path: Path) -> None:
    tunes = list(_tunes(40))
    for i in (21, 25):  # kind 1: the pick's median made tiny (the ratios overflow), then 0
        t, tiny = tunes[i], 1e-320 if i == 21 else 0.0
        tiled = CandidateMeasurement("tiled", _kernel(4), "ok", tiny, (tiny, tiny))
        cands = (t.candidates[0], tiled)  # kind 1's arrangement: read by its layout
        tunes[i] = TuneRecord(
            t.key, t.operation, t.shape_key, t.device, t.checksum, t.status, t.pick, cands
        )
    path = tmp_path / "r.warm"
    with Bundle.create(path) as bundle:
        bundle.put(tunes=tunes)
    laid, parsed = _both(path)
    assert [t.record() if type(t) is LaidTune else t for t in laid] == parsed
    assert tune_lines(laid) == tune_lines(parsed)
    assert "Infinity" in tune_lines(parsed)


def test_layouts_kept_are_bounded(bundle_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tune_layout, "KEPT_LAYOUTS", 1)
    laid, parsed = _both(bundle_path)
    assert 0 < sum(type(t) is LaidTune for t in laid) < 100  # one operation's only
    assert [t.record() if type(t) is LaidTune else t for t in laid] == parsed


def test_many_devices_of_one_layout_are_written_alike(tmp_path: Path) -> None:
    tunes = []
    for i, t in enumerate(_tunes(80)):  # nine devices a layout: more lines than it keeps
        device = f"cuda|GPU {i % 36}|sm_90|570"
        key = tune_key(t.operation, t.shape_key, device, t.checksum)
        fields = (key, t.operation, t.shape_key, device, t.checksum, t.status, t.pick)
        tunes.append(TuneRecord(*fields, t.candidates, t.seconds, t.measured_at))
    path = tmp_path / "d.warm"
    with Bundle.create(path) as bundle:
        bundle.put(tunes=tunes)
    laid, parsed = _both(path)
    assert sum(type(t) is LaidTune for t in laid) > 60
    assert tune_lines(laid) == tune_lines(parsed)


def test_a_lone_pick_at_zero_has_no_ratio_as_json_writes_it(tmp_path: Path) -> None:
    """A pick whose median is 0 (or -0.0) where no other candidate has a median: its own
    ratio is none (0 / 0), by layout as by the parser, from the layout's second row on."""

    def cands(i: int) -> tuple[CandidateMeasurement, ...]:
        z = (1e-4, 0.0, -0.0)[i % 3]
        return (
            CandidateMeasurement("c0", _kernel(0), "ok", z, (z,)),
            CandidateMeasurement("c1", _kernel(1), "failed", None, (), "boom"),
        )

    laid, parsed = _both(_stored(tmp_path / "zero.warm", [cands(i) for i in range(6)]))
    assert sum(type(t) is LaidTune for t in laid) >= 4
    assert tune_lines(laid).split(LINES_APART) == tune_lines(parsed).split(LINES_APART)


def test_a_long_head_of_kernel_ids_is_never_kept_as_a_layout(tmp_path: Path) -> None:
    """A layout's key holds its document's head of kernel ids: a head naming more than
    `KEPT_IDS` kernels is parsed row by row, never kept (a bundle cannot make each of the
    kept layouts hold megabytes of ids)."""
    many = 70  # kernels, each named once: a head of 70 ids
    assert many > tune_layout.KEPT_IDS
    every = [
        tuple(
            CandidateMeasurement(f"c{j}", _kernel(j), "ok", 1e-4 + j * 1e-6 + i * 1e-7, ())
            for j in range(many)
        )
        for i in range(4)
    ]
    laid, parsed = _both(_stored(tmp_path / "long.warm", every))
    assert not any(type(t) is LaidTune for t in laid)
    assert laid == parsed


def _stored(path: Path, every: list[tuple[CandidateMeasurement, ...]]) -> Path:
    """A bundle at `path` of one operation's tunes, one a shape, each of `every`'s
    candidates, "c0" picked."""
    tunes = []
    for i, cands in enumerate(every):
        op, shape, checksum = "op", f"float32[{i}]", f"{0:064x}"
        key = tune_key(op, shape, DEVICE, checksum)
        tunes.append(
            TuneRecord(key, op, shape, DEVICE, checksum, "measured", "c0", cands, 0.5, 1e9)
        )
    with Bundle.create(path) as bundle:
        bundle.put(tunes=tunes)
    return path
