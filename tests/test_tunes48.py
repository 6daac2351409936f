"""tunes48: a tune row's samples no longer set what serving it, or checking it, costs.

A deflated tune row of ~7 KB inflates to 500,000 samples (4 MiB, under the reader's bound);
each was made into a float (~75 ms a row) by a production process that serves its pick by
name, and by `warm verify`, which only checks it. A serving read (`samples=False`) makes no
sample and keeps no reason, and decides every row as the full read does (its times checked
as bytes). Real SQLite files, the real CLI (what a command says: a fork,
`tests/forked_cli.py`; what one costs: started for it); the row parser compared on rows as
warm packs them and as an attacker would."""

from __future__ import annotations

import math
import sqlite3
import struct
import subprocess
import sys
import time
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

SERVE_CPU = """
import runpy, sys, time, warmcli
workload = runpy.run_path(sys.argv[1])["workload"]
rt = warmcli.runtime("host")
start = time.process_time()
workload(rt)
print(len(warmcli.report().tunes), time.process_time() - start)
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


def _serving_cpu(warm: Warm, workload: Path, bundle: Path) -> float:
    env = dict(warm.env, WARM_BUNDLE=str(bundle))
    served = subprocess.run(
        [sys.executable, "-c", SERVE_CPU, str(workload)],
        capture_output=True, text=True, env=env, cwd=bundle.parent, timeout=120,
    )  # fmt: skip
    assert served.returncode == 0, served.stderr[-2000:]
    tunes, cpu = served.stdout.split()
    assert tunes == "0"  # every tune served, none measured
    return float(cpu)


def test_serving_tunes_of_many_samples_costs_no_float_a_sample(
    bloated: tuple[Warm, Path, Path, Path],
) -> None:
    """A production process serving the 20 bloated tunes spent 0.48 s more CPU than one
    serving them as warm wrote them (each sample made a float, then let go of); now ~0.1 s
    more: each row is inflated and its bytes checked. The picks are the same either way."""
    warm, workload, good, fat = bloated
    grown = _serving_cpu(warm, workload, fat) - _serving_cpu(warm, workload, good)
    assert grown < 0.25, f"{grown:.2f} s more"  # (before: 0.48 s)
    with Bundle.open(good) as a, Bundle.open(fat) as b:
        for tune in a.each_tune():
            served = b.tune(tune.key, samples=False)
            assert served is not None and served.pick == tune.pick
            assert served == _stripped(tune)
            assert not any(c.samples for c in served.candidates)


def test_verify_checks_tunes_of_many_samples_without_making_them(
    bloated: tuple[Warm, Path, Path, Path], forked: Callable[[Warm], Warm]
) -> None:
    """`warm verify`'s checks of the 20 bloated tunes took 0.49 s of CPU (a float a sample);
    now 0.06 s, and the bundle is as sound as it was."""
    warm, _, _, fat = bloated
    spent = []  # (the least of three: one on a loaded machine took 0.27 s, the others 0.06)
    for _ in range(3):
        with Bundle.open(fat) as bundle, bundle.snapshot():
            start = time.process_time()
            problems = [p for _, p in bundle.integrity() if p is not None]
            spent.append(time.process_time() - start)
        assert problems == []
    assert min(spent) < 0.25, f"{min(spent):.2f} s"  # (before: 0.49 s)
    verified = forked(warm)("verify", fat)  # (its output: forked)
    assert verified.returncode == 0 and ": sound" in verified.stdout, verified.stdout


def _child_cpu(warm: Warm, *args: object) -> float:
    """The CPU seconds `warm *args` took (it must succeed)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = warm(*map(str, args))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr[-2000:]
    return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)


def test_merge_carries_a_format3_tune_without_making_its_samples(
    bloated: tuple[Warm, Path, Path, Path], tmp_path: Path, forked: Callable[[Warm], Warm]
) -> None:
    """`warm merge` unpacked every tune (a float a sample) and packed it again (deflated anew:
    4 MiB each): the 20 bloated tunes, as format 3 stores them, took 0.8 s more CPU than the
    same tunes without their samples (2.9 s, not 0.7 s, on a busy machine); now 0.1 s. A
    format-3 document is carried as it is now, but for its head of kernel ids (checked as a
    serving read checks it): the rows are those the unpacking merge wrote, byte for byte."""
    warm, _, good, fat = bloated
    three = tmp_path / "three.warm"
    made = forked(warm)("merge", fat, "-o", three)  # (not measured: forked)
    assert made.returncode == 0, made.stderr  # (format 2's rows, packed anew)
    spent = _child_cpu(warm, "merge", three, good, "-o", tmp_path / "a.warm")
    flat = _child_cpu(warm, "merge", good, "-o", tmp_path / "b.warm")
    assert spent - flat < 0.35, f"{spent - flat:.2f} s more"  # (before: 0.8 s more)
    rows = []
    for path in (three, tmp_path / "a.warm"):
        conn = sqlite3.connect(path)
        rows.append(conn.execute("SELECT * FROM tune_kernels ORDER BY id").fetchall())
        rows.append([r[:10] for r in conn.execute("SELECT * FROM tunes ORDER BY key")])
        conn.close()
    assert len(rows[1]) == 20 and rows[:2] == rows[2:]  # (but when each row was written)
    with Bundle.open(three) as a, Bundle.open(tmp_path / "a.warm") as b:
        assert list(a.each_tune()) == list(b.each_tune())
