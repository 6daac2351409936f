"""tunes48: a tune row's samples no longer set what serving it, or checking it, costs.

A deflated tune row of ~7 KB inflates to 500,000 samples (4 MiB, under the reader's bound);
each was made into a float (~75 ms a row) by a production process that serves its pick by
name, and by `warm verify`, which only checks it. A serving read (`samples=False`) makes no
sample and keeps no reason, and decides every row as the full read does (its times checked
as bytes). What a read makes is counted as the most bytes Python held at once over it
(tracemalloc: 500,000 samples made floats are 16 MB), never timed. Real SQLite files, the
real CLI (forked: `tests/forked_cli.py`); the row parser compared on rows as warm packs
them and as an attacker would."""

from __future__ import annotations

import math
import sqlite3
import struct
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm
from test_hostile48 import MANY_SHAPES, _with_samples

from warmcli.bundle.candidates import pack, unpack
from warmcli.bundle.rows import _Malformed
from warmcli.bundle.store import Bundle
from warmcli.bundle.tune_row import _tune_record
from warmcli.records import CandidateMeasurement, TuneRecord, tune_key

SERVE_PEAK = """
import json, runpy, sys, tracemalloc, warmcli
workload = runpy.run_path(sys.argv[1])["workload"]
rt = warmcli.runtime("host")
tracemalloc.start()
workload(rt)
peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
print(json.dumps([len(warmcli.report().tunes), peak]))
"""


def _stripped(record: TuneRecord) -> TuneRecord:
    """`record` as a serving read holds it: its candidates without samples or reasons."""
    held = tuple(CandidateMeasurement(*c._values()[:4]) for c in record.candidates)
    return TuneRecord(*record._values()[:7], held, record.seconds, record.measured_at)


def _row(candidates: tuple[CandidateMeasurement, ...], pick: str = "a") -> tuple[object, ...]:
    """A measured tune row as `TUNE_SELECT` reads it, its candidates packed (format 2)."""
    checksum = "c" * 64
    key = tune_key("op", "s", "dev", checksum)
    return (key, "op", "s", "dev", checksum, "measured", pick, pack(candidates), 1.0, 2.0, None)


def _decided(row: tuple[object, ...], samples: bool) -> object:
    try:
        record = _tune_record(row, None, samples)
    except _Malformed as exc:
        return f"refused: {exc}"
    return record if samples else ("read", record)


K = "ab" * 32
ODD_TIMES = [
    ((1e-4, 2e-4), 1e-4),
    ((), None),
    ((math.nan,), 1e-4),
    ((1e-4, -1.0), 1e-4),
    ((-0.0, 0.0), 0.0),
    ((-0.0,), -0.0),
    ((2.0**1000,) * 3, 1e-4),
    ((1.7e308, 1.7e308), 1e-4),  # each finite, their sum not
    ((1e300,), 1.7e308),
    ((math.inf,), 1e-4),
    ((1e-4,), math.nan),
    ((1e-4,), -1e-4),
    ((2.0**992,) * 4, 2.0**992),
    ((5e-324, 0.0), 5e-324),  # subnormal
]


@pytest.mark.parametrize(("samples", "seconds"), ODD_TIMES)
def test_a_serving_read_decides_every_row_as_the_full_read(
    samples: tuple[float, ...], seconds: float | None
) -> None:
    """Times odd or not, anywhere in the document: both reads refuse it with the same
    words, or read the same tune (the serving read without samples and reasons)."""
    other = CandidateMeasurement("b", K, "failed", None, (), "it broke " * 50)
    for cands in [
        (CandidateMeasurement("a", K, "ok", seconds, samples, "why"), other),
        (other, CandidateMeasurement("a", K, "ok", 1e-4, (1e-4,) * 2000 + samples)),
    ]:
        row = _row(cands)
        full, served = _decided(row, True), _decided(row, False)
        if isinstance(full, str):
            assert served == full
        else:
            assert isinstance(full, TuneRecord)
            assert served == ("read", _stripped(full))


def test_a_serving_read_keeps_every_check_of_the_pick() -> None:
    """A pick that is no candidate, or one that failed, a document cut short, with bytes
    after its last candidate or a count of samples past its end: refused by both reads
    alike."""
    good = (CandidateMeasurement("a", K, "ok", 1e-4, (1e-4,) * 60_000),)
    failed = (CandidateMeasurement("a", K, "failed", None, (1e-4,) * 3, "no"),)
    rows = [_row(good, pick="z"), _row(failed)]
    body = zlib.decompress(pack(good)[1:])
    for changed in (body[:-3], body + b"\0", body[:50] + struct.pack("<I", 9**9) + body[54:]):
        rows.append((*_row(good)[:7], b"\1" + zlib.compress(changed), 1.0, 2.0, None))
    for row in rows:
        full = _decided(row, True)
        assert isinstance(full, str) and full.startswith("refused"), full
        assert _decided(row, False) == full


def test_warms_own_extreme_tunes_read_alike_both_ways() -> None:
    """Tunes as warm measures them at its limits (1 to 10,000 repeats of one time on a coarse
    clock, 2 to 1,000 candidates), packed as format 3: each read back by both reads alike."""
    ids: dict[bytes, int] = {}
    intern = lambda key: ids.setdefault(key, len(ids))  # noqa: E731
    for candidates, repeats in ((2, 1), (2, 10_000), (1000, 5), (300, 1000), (2, 100_000)):
        cands = tuple(
            CandidateMeasurement(f"c{i}", f"{i % 7:064x}", "ok", 1e-6, (1e-6,) * repeats)
            for i in range(candidates)
        )
        doc = pack(cands, intern)
        keys = {i: k.hex() for k, i in ids.items()}
        assert unpack(doc, keys.__getitem__) == cands
        served = unpack(doc, keys.__getitem__, samples=False)
        assert served == tuple(CandidateMeasurement(*c._values()[:4]) for c in cands)


@pytest.fixture(scope="module")
def bloated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Warm, Path, Path, Path]:
    """The 20 shapes of hostile48's workload warmed (good.warm), and the same bundle with
    500,000 samples more in each tune's pick (bloated.warm, ~460 KB)."""
    import os

    base = tmp_path_factory.mktemp("tunes48")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = Warm(dict(env, WARM_HOME=str(base / "home"), COLUMNS="200"))
    workload = base / "many.py"
    workload.write_text(MANY_SHAPES.format(examples=str(EXAMPLES)))
    good = base / "good.warm"
    done = warm("run", workload, "--bundle", good, "-q")
    assert done.returncode == 0, done.stderr
    bloated = base / "bloated.warm"
    bloated.write_bytes(good.read_bytes())
    _with_samples(bloated, 500_000)
    return warm, workload, good, bloated


def _peak(call: Callable[[], object]) -> int:
    """The most bytes Python held at once (tracemalloc) over `call()`, beyond what it held
    before: 500,000 samples made into floats are 16 MB (a tuple of them, each a float), a
    row inflated is 4 MiB, a row left packed ~7 KB."""
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _serving_peak(warm: Warm, workload: Path, bundle: Path) -> int:
    """The peak (`_peak`) of a production process (forked) serving `workload` over `bundle`,
    asserted to measure no tune."""
    tunes, peak = warm.production(SERVE_PEAK, workload, bundle=bundle)
    assert tunes == 0  # every tune served, none measured
    return int(peak)


def test_serving_tunes_of_many_samples_makes_no_float_a_sample(
    bloated: tuple[Warm, Path, Path, Path], forked: Callable[[Warm], Warm]
) -> None:
    """A production process serving the 20 bloated tunes made each of its pick's 500,000
    samples a float, then let go of them: 0.48 s more CPU than serving them as warm wrote
    them, 22.7 MiB more held at once. Now each row is inflated (4 MiB, held twice as its
    first 64 KiB is joined to the rest) and its bytes checked, no float made: 7.6 MiB more.
    The picks are the same either way."""
    warm, workload, good, fat = bloated
    grown = _serving_peak(forked(warm), workload, fat) - _serving_peak(forked(warm), workload, good)
    assert grown < 12 << 20, f"{grown >> 20} MiB more"  # (7.6 MiB; 22.7 a float a sample)
    with Bundle.open(good) as a, Bundle.open(fat) as b:
        for tune in a.each_tune():
            served = b.tune(tune.key, samples=False)
            assert served is not None and served.pick == tune.pick
            assert served == _stripped(tune)
            assert not any(c.samples for c in served.candidates)


def test_verify_checks_tunes_of_many_samples_without_making_them(
    bloated: tuple[Warm, Path, Path, Path], forked: Callable[[Warm], Warm]
) -> None:
    """`warm verify`'s checks of the 20 bloated tunes made every sample a float (0.49 s of
    CPU, 23.1 MiB held at once); now none (8.0 MiB: a row inflated), and the bundle is as
    sound as it was."""
    warm, _, _, fat = bloated
    with Bundle.open(fat) as bundle, bundle.snapshot():
        problems: list[object] = []
        peak = _peak(lambda: problems.extend(p for _, p in bundle.integrity() if p is not None))
    assert problems == []
    assert peak < 12 << 20, f"{peak >> 20} MiB"  # (8.0 MiB; 23.1 a float a sample)
    verified = forked(warm)("verify", fat)  # (its output: forked)
    assert verified.returncode == 0 and ": sound" in verified.stdout, verified.stdout


def test_merge_carries_a_format3_tune_without_making_its_samples(
    bloated: tuple[Warm, Path, Path, Path], tmp_path: Path, forked: Callable[[Warm], Warm]
) -> None:
    """`warm merge` unpacked every tune (a float a sample) and packed it again (deflated anew:
    4 MiB each): the 20 bloated tunes, as format 3 stores them, took 0.8 s more CPU than the
    same tunes without their samples (38.4 MiB held at once). A format-3 document is
    carried as it is now, but for its head of kernel ids (checked as a serving read checks
    it: inflated, no float made; 8.0 MiB at once), and the rows are those the unpacking
    merge wrote, byte for byte. (The merge measured is the library's, in this process: the
    command's made the format-3 bundle.)"""
    from warmcli.ops.merge import merge_bundles

    warm, _, good, fat = bloated
    three = tmp_path / "three.warm"
    made = forked(warm)("merge", fat, "-o", three)
    assert made.returncode == 0, made.stderr  # (format 2's rows, packed anew)
    merged = tmp_path / "a.warm"
    peak = _peak(lambda: merge_bundles([three, good], merged))
    assert peak < 16 << 20, f"{peak >> 20} MiB"  # (8.0 MiB; 38.4 unpacked, packed anew)
    rows = []
    for path in (three, merged):
        conn = sqlite3.connect(path)
        rows.append(conn.execute("SELECT * FROM tune_kernels ORDER BY id").fetchall())
        rows.append([r[:10] for r in conn.execute("SELECT * FROM tunes ORDER BY key")])
        conn.close()
    assert len(rows[1]) == 20 and rows[:2] == rows[2:]  # (but when each row was written)
    with Bundle.open(three) as a, Bundle.open(merged) as b:
        assert list(a.each_tune()) == list(b.each_tune())
