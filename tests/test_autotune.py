"""Tunes on the host backend for real: measure, pick, keep every measurement, and key right."""

from __future__ import annotations

from pathlib import Path

import pytest

from warmcli import (
    Kernel,
    ProcessMode,
    ProcessModeOverride,
    Runtime,
    Tunable,
    TuneFailure,
)
from warmcli.backends.host import HostDevice
from warmcli.bundle.store import Bundle
from warmcli.execution.stream_mode import StreamMode

SOURCE = """
void work(float *x, int n) {
    for (int r = 0; r < REPEAT; r++)
        for (int i = 0; i < n; i++) x[i] = x[i] * 0.5f + 1.0f;
}
"""


def candidates(*repeats: int) -> dict[str, Kernel]:
    return {f"r{r}": Kernel(SOURCE, "work", "Pi", defines={"REPEAT": r}) for r in repeats}


seen_modes: list[StreamMode] = []


def launch(rt: Runtime, kernel: Kernel, x, n: int, *, stream=None) -> None:
    seen_modes.append((stream or rt.default_stream).mode)
    rt.launch(kernel, x, n, stream=stream)


def tunable(*repeats: int, **kw) -> Tunable:
    return Tunable("work", candidates(*repeats), launch, **kw)


def test_tune_measures_every_candidate_on_an_execute_stream_and_picks_the_fastest() -> None:
    rt = Runtime(HostDevice())
    x = rt.buffer(20000)
    op = tunable(1, 64, 8, repeats=3)
    seen_modes.clear()
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE) as collector:
        pick = rt.tune(op, x, 20000)
    assert pick == "r1", "one pass over the data is the fastest"
    a = collector.reader().autotune
    assert (a.registered, a.measured, a.hits, a.candidates_measured) == (1, 1, 0, 3)
    # measurements on the stream switched to Execute, then the pick on the discarding stream
    assert seen_modes[:-1] == [StreamMode.EXECUTE] * (3 * (1 + 3))
    assert seen_modes[-1] is StreamMode.DISCARD
    [record] = rt.tunes.unpersisted()
    assert {c.name for c in record.candidates} == {"r1", "r8", "r64"}
    assert all(len(c.samples) == 3 and c.seconds > 0 for c in record.candidates)
    times = {c.name: c.seconds for c in record.candidates}
    assert times["r1"] < times["r64"]
    rt.close()


def test_hit_measures_nothing_and_runs_the_pick() -> None:
    rt = Runtime(HostDevice())
    x = rt.buffer(1000)
    op = tunable(1, 4)
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE):
        rt.tune(op, x, 1000)
    with ProcessModeOverride(ProcessMode.EXECUTE) as collector:
        assert rt.tune(op, x, 1000) == rt.tunes.unpersisted()[0].pick
    a, e = collector.reader().autotune, collector.reader().execution
    assert (a.measured, a.hits, e.executed) == (0, 1, 1)
    rt.close()


def test_compile_only_queues_every_candidate() -> None:
    rt = Runtime(HostDevice())
    with ProcessModeOverride(ProcessMode.COMPILE_ONLY) as collector:
        assert rt.tune(tunable(1, 2, 3, 4), rt.buffer(10), 10) is None
    r = collector.reader()
    assert (r.compilation.queued, r.compilation.compiled, r.autotune.measured) == (4, 0, 0)
    assert r.autotune.candidates_registered == 4
    rt.close()


def test_shape_key_separates_shapes_and_buckets() -> None:
    rt = Runtime(HostDevice())
    op = tunable(1, 2)
    a, b = rt.buffer((10, 3)), rt.buffer((12, 3))
    assert op.shape_key((a, 30)) != op.shape_key((b, 36))
    bucketed = tunable(1, 2, bucket="pow2")
    assert bucketed.shape_key((a, 30)) == bucketed.shape_key((b, 32)) == "float32[16x4] 32"
    rt.close()


def test_candidate_set_change_invalidates_the_pick(tmp_path: Path) -> None:
    path = tmp_path / "b.warm"
    rt = Runtime(HostDevice())
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE):
        rt.tune(tunable(2, 4), rt.buffer(100), 100)
    with Bundle.open(path, write=True) as bundle:
        rt.persist(bundle)
    rt.close()

    with Bundle.open(path) as bundle:
        same, grown, renamed = (
            tunable(2, 4),
            tunable(2, 4, 8),
            Tunable("work", {"two": candidates(2)["r2"], "r4": candidates(4)["r4"]}, launch),
        )
        assert same.checksum != grown.checksum != renamed.checksum
        for op, measured in ((same, 0), (grown, 1), (renamed, 1)):
            fresh = Runtime(HostDevice(), bundle)
            with ProcessModeOverride(ProcessMode.EXECUTE) as collector:
                fresh.tune(op, fresh.buffer(100), 100)
            assert collector.reader().autotune.measured == measured, op.candidates.keys()
            fresh.close()


def test_failing_candidate_is_excluded_and_recorded() -> None:
    rt = Runtime(HostDevice())
    bad = Kernel("void work(float *x, int n) { x[0] = nonsense; }", "work", "Pi")
    op = Tunable("work", {**candidates(1, 2), "bad": bad}, launch)
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE) as collector:
        pick = rt.tune(op, rt.buffer(50), 50)
    [record] = rt.tunes.unpersisted()
    ok = [c for c in record.candidates if c.status == "ok"]
    assert pick == min(ok, key=lambda c: c.seconds).name
    failed = [c for c in record.candidates if c.status == "failed"]
    assert [c.name for c in failed] == ["bad"]
    assert "nonsense" in failed[0].reason
    assert collector.reader().autotune.candidates_failed == 1
    rt.close()


def test_every_candidate_failing_fails_the_tune_with_all_logs() -> None:
    rt = Runtime(HostDevice())
    op = Tunable(
        "work",
        {
            f"bad{i}": Kernel(f"void work(float *x, int n) {{ x[0] = oops{i}; }}", "work", "Pi")
            for i in range(2)
        },
        launch,
    )
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE):
        with pytest.raises(TuneFailure, match="every candidate failed") as info:
            rt.tune(op, rt.buffer(5), 5)
    assert "bad0" in str(info.value) and "bad1" in str(info.value)
    rt.close()


def test_numpy_scalars_key_like_the_python_numbers_they_hold() -> None:
    import numpy as np

    rt = Runtime(HostDevice())
    op = tunable(1, 2)
    x = rt.buffer(10)
    assert op.shape_key((x, np.int64(10))) == op.shape_key((x, 10))
    assert op.shape_key((x, np.float64(1.5))) == op.shape_key((x, 1.5))
    assert op.shape_key((x, np.int32(12))) != op.shape_key((x, 10))
    rt.close()
