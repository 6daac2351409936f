"""Registrations settle exactly once, to the collector they were made in (the seed's
statistics): one test per outcome, abandoned included, and `settled == registered`
for every pass after `warm run` on each example."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm, nvcc_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import (
    Kernel,
    KernelCompileError,
    ProcessMode,
    ProcessModeOverride,
    Runtime,
    StatisticsCollector,
    Tunable,
    TuneFailure,
)
from warmcli.backends.base import Buffer, DeviceError
from warmcli.backends.host import HostDevice
from warmcli.bundle.store import Bundle
from warmcli.execution.snapshots import AutotuneStatistics, CompilationStatistics

SOURCE = "void k(float *x) { x[0] += I; }"
BROKEN = "void k(float *x) { x[0] += ; }"
WORK = "void work(float *x, int n) { for (int i = 0; i < n * R; i++) x[i % n] += 1.0f; }"


def kernels(n: int, source: str = SOURCE) -> list[Kernel]:
    return [Kernel(source, "k", "P", defines={"I": i}) for i in range(n)]


def compilation(collector: StatisticsCollector) -> CompilationStatistics:
    return collector.reader().compilation


def autotune(collector: StatisticsCollector) -> AutotuneStatistics:
    return collector.reader().autotune


def launch(rt: Runtime, kernel: Kernel, x, n: int, *, stream=None) -> None:
    rt.launch(kernel, x, n, stream=stream)


def tunable(*repeats: int, source: str = WORK) -> Tunable:
    candidates = {f"r{r}": Kernel(source, "work", "Pi", defines={"R": r}) for r in repeats}
    return Tunable("work", candidates, launch, repeats=1, warmup=0)


def host(size: int = 1, device: HostDevice | None = None) -> tuple[Runtime, Buffer]:
    """A runtime on the host backend and one buffer of `size` floats on it."""
    rt = Runtime(device or HostDevice())
    return rt, rt.buffer(size)


class CompileOnlyHost(HostDevice):
    """The host backend as a device that compiles and never executes."""

    can_execute = False


# -- kernels -------------------------------------------------------------------------------


def test_compiled_settles_to_the_collector_it_was_queued_under_after_it_closed() -> None:
    rt = Runtime(HostDevice(), jobs=2)
    buf = rt.buffer(1)
    first, second = StatisticsCollector(), StatisticsCollector()
    with ProcessModeOverride(ProcessMode.COMPILE_ONLY, first):
        for k in kernels(3):
            rt.launch(k, buf)
    c = compilation(first)
    assert (c.registered, c.queued, c.settled) == (3, 3, 0), "queued: not settled yet"
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE, second):
        rt.launch(kernels(1)[0], buf)  # the first load compiles the whole queue
    c = compilation(first)
    assert (c.registered, c.compiled, c.settled) == (3, 3, 3), "settled after it closed"
    c2 = compilation(second)
    assert (c2.registered, c2.compiled, c2.settled) == (3, 3, 3), "the batch obtained all"
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE, second):
        for k in kernels(3):
            rt.launch(k, buf)
    assert compilation(second).registered == 3, "a key registers once per collector"
    third = StatisticsCollector()
    with ProcessModeOverride(ProcessMode.EXECUTE, third):
        rt.launch(kernels(1)[0], buf)
    assert compilation(third).registered == 0, "obtained already: counts nowhere"
    rt.close()
    assert compilation(first).abandoned == 0, "nothing was left open"


def test_loaded_and_stored(tmp_path: Path) -> None:
    path = tmp_path / "b.warm"
    ks = kernels(2)
    with Bundle.open(path, write=True) as bundle:
        rt = Runtime(HostDevice(), bundle, jobs=2, misses=None)
        buf = rt.buffer(1)
        with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE) as warming:
            for k in ks:
                rt.launch(k, buf)
            rt.persist(bundle)
            rt.persist(bundle)  # told again: counted once
        c = compilation(warming)
        assert (c.registered, c.compiled, c.stored, c.settled) == (2, 2, 2, 2)
    with Bundle.open(path) as bundle:
        rt = Runtime(HostDevice(), bundle)
        buf = rt.buffer(1)
        with ProcessModeOverride(ProcessMode.EXECUTE) as serving:
            for k in ks:
                rt.launch(k, buf)
        c = compilation(serving)
        assert (c.registered, c.loaded, c.compiled, c.stored, c.settled) == (2, 2, 0, 0, 2)


def test_failed() -> None:
    rt, buf = host()
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE) as collector:
        with pytest.raises(KernelCompileError):
            rt.launch(Kernel(BROKEN, "k", "P"), buf)
        with pytest.raises(KernelCompileError):
            rt.launch(Kernel(BROKEN, "k", "P"), buf)
    c = compilation(collector)
    assert (c.registered, c.failed, c.compiled, c.settled) == (1, 1, 0, 1)


def test_refused_by_the_device_at_load(monkeypatch: pytest.MonkeyPatch) -> None:
    rt, buf = host()

    def refuse(binary: bytes, sha256: str | None = None) -> object:
        raise DeviceError("the device refuses this build")

    monkeypatch.setattr(rt.device, "load_module", refuse)
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE) as collector:
        for _ in range(2):
            with pytest.raises(DeviceError):
                rt.launch(kernels(1)[0], buf)
    c = compilation(collector)
    assert (c.registered, c.compiled, c.refused, c.settled) == (1, 1, 1, 1)


def test_abandoned_when_the_batch_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    import warmcli.backends.batch as batch

    rt, buf = host()
    queued, compiling = StatisticsCollector(), StatisticsCollector()
    with ProcessModeOverride(ProcessMode.COMPILE_ONLY, queued):
        for k in kernels(3):
            rt.launch(k, buf)

    def interrupted(*args: object, **kwargs: object) -> object:
        raise KeyboardInterrupt

    monkeypatch.setattr(batch, "compile_batch", interrupted)
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE, compiling):
        with pytest.raises(KeyboardInterrupt):
            rt.launch(kernels(1)[0], buf)
    for collector in (queued, compiling):
        c = compilation(collector)
        assert (c.registered, c.abandoned, c.compiled, c.settled) == (3, 3, 0, 3)


def test_abandoned_when_the_runtime_closes_with_work_queued() -> None:
    rt, buf = host()
    with ProcessModeOverride(ProcessMode.COMPILE_ONLY) as collector:
        for k in kernels(2):
            rt.launch(k, buf)
        rt.tune(tunable(1, 2), buf, 4)  # gathered: registered, candidates queued
    rt.close()
    c, a = compilation(collector), autotune(collector)
    assert (c.registered, c.abandoned, c.settled) == (4, 4, 4)
    assert (a.registered, a.abandoned, a.settled) == (1, 1, 1)
    rt.close()
    assert compilation(collector).abandoned == 4, "settled once"


# -- tunes ---------------------------------------------------------------------------------


def test_tune_gathered_then_measured_and_persisted(tmp_path: Path) -> None:
    with Bundle.open(tmp_path / "b.warm", write=True) as bundle:
        rt = Runtime(HostDevice(), bundle, misses=None)
        x = rt.buffer(8)
        gathered, measuring = StatisticsCollector(), StatisticsCollector()
        with ProcessModeOverride(ProcessMode.COMPILE_ONLY, gathered):
            rt.tune(tunable(1, 2), x, 8)
        assert (autotune(gathered).registered, autotune(gathered).settled) == (1, 0)
        with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE, measuring):
            rt.tune(tunable(1, 2), x, 8)
            rt.tune(tunable(1, 2), x, 8)  # a hit now: registers nowhere
            rt.persist(bundle)
        for collector in (gathered, measuring):
            a = autotune(collector)
            assert (a.registered, a.measured, a.persisted, a.settled) == (1, 1, 1, 1)
        assert autotune(measuring).hits == 1


def test_tune_failed() -> None:
    rt, x = host(8)
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE) as collector:
        with pytest.raises(TuneFailure):
            rt.tune(tunable(1, 2, source=BROKEN.replace("k(", "work(")), x, 8)
    a = autotune(collector)
    assert (a.registered, a.failed, a.measured, a.settled) == (1, 1, 0, 1)


def test_tune_abandoned_when_measuring_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    runtime_module = importlib.import_module("warmcli.runtime.runtime")

    def lost(*args: object, **kwargs: object) -> object:
        raise RuntimeError("the device was lost while it measured")

    monkeypatch.setattr(runtime_module, "measure", lost)
    rt, x = host(8)
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE) as collector:
        with pytest.raises(RuntimeError):
            rt.tune(tunable(1, 2), x, 8)
    a = autotune(collector)
    assert (a.registered, a.abandoned, a.measured, a.settled) == (1, 1, 0, 1)


def test_tune_pending_on_a_device_that_cannot_execute() -> None:
    rt, x = host(8, CompileOnlyHost())
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE) as collector:
        assert rt.tune(tunable(1, 2), x, 8) is None
    with ProcessModeOverride(ProcessMode.COMPILE_ONLY) as later:
        rt.tune(tunable(1, 2), x, 8)  # recorded pending, nothing here can measure it
    a = autotune(collector)
    assert (a.registered, a.pending, a.measured, a.settled) == (1, 1, 0, 1)
    b = autotune(later)  # reached, held pending: registered and settled so (stats40)
    assert (b.registered, b.pending, b.settled, b.unrecorded) == (1, 1, 1, 0)


def test_a_single_candidate_is_answered_not_tuned() -> None:
    rt, x = host(8)
    for mode in (ProcessMode.COMPILE_ONLY, ProcessMode.COMPILE_AND_AUTOTUNE):
        with ProcessModeOverride(mode) as collector:
            assert rt.tune(tunable(3), x, 8) == "r3"
        a = autotune(collector)
        assert (a.registered, a.settled, a.hits, a.candidates_registered) == (0, 0, 0, 0)
    assert rt.tunes.unpersisted() == [], "nothing measured, nothing to store"
    assert compilation(collector).compiled == 1, "its kernel is still obtained"


# -- after `warm run` on each example ------------------------------------------------------

EXAMPLE_RUNS = [
    ("matmul_host.py",),
    ("many_kernels_host.py",),
    ("matmul_cuda.py", "--arch", "sm_90"),
    ("saxpy_cuda.py", "--arch", "sm_90"),
    ("pycuda_style.py", "--pycuda", "--arch", "sm_90", "--allow-discarded-reads"),
]


@pytest.mark.parametrize("run", EXAMPLE_RUNS, ids=[r[0] for r in EXAMPLE_RUNS])
def test_every_pass_settles_what_it_registered(
    run: tuple[str, ...], warm: Warm, bundle_path: Path
) -> None:
    if "--arch" in run:
        nvcc_or_skip()
    # many_kernels_host's 200 kernels as 20 (and 4 tunes): what each pass registers and
    # settles is counted alike, as matmul_host's 6 are (~0.7 CPU-s less)
    warm.env["WARM_EXAMPLE_KERNELS"] = "20"
    doc = warm.json("run", EXAMPLES / run[0], *run[1:], "--bundle", bundle_path)
    assert [p["mode"][:6] for p in doc["passes"]] == ["Compil", "Compil", "Verify"]
    for p in doc["passes"]:
        for view in ("compilation", "autotune"):
            end = p["settled_by_end"][view]
            assert end["settled"] == end["registered"], (p["mode"], view, end)
            assert end["abandoned"] == 0, (p["mode"], view, end)
            assert p[view]["settled"] <= p[view]["registered"]
    first, second = doc["passes"][:2]
    assert first["settled_by_end"]["compilation"]["registered"] > 0
    queued = first["compilation"]["settled"], first["settled_by_end"]["compilation"]["settled"]
    assert queued[0] < queued[1], "what it queued settles in the next pass"
    assert 0 < second["compilation"]["stored"] <= doc["stored"]["kernels"]


def test_registered_and_settled_at_once_counts_as_register_then_settle() -> None:
    """`Registrations.register_settled` (a kernel the bundle serves) counts what `register`
    then `settle` would: once per collector, and what another collector left open is
    settled too; a later count reaches both registrations."""
    from warmcli.execution.statistics import Registrations, StatisticsCollector

    first, second = StatisticsCollector(), StatisticsCollector()
    registrations = Registrations("host", "compilation")
    registrations.register(first, "k")  # queued under one collector: open
    registrations.register_settled(second, "k", "loaded")  # served under another
    registrations.register_settled(second, "k", "loaded")  # asked again: nothing more
    for collector in (first, second):
        stats = collector.reader().compilation
        assert (stats.registered, stats.loaded, stats.settled) == (1, 1, 1)
    registrations.record("k", "refused")
    assert [c.reader().compilation.refused for c in (first, second)] == [1, 1]


def test_registered_and_settled_at_once_is_counted_later_once_per_collector() -> None:
    """A key registered and settled at once (a served kernel) is held without a
    `Registration` until one is asked for: a later count (refused, stored) still reaches
    it once, however often it is told, and a later registration elsewhere settles beside it."""
    from warmcli.execution.statistics import Registrations, StatisticsCollector

    first, second = StatisticsCollector(), StatisticsCollector()
    registrations = Registrations("host", "compilation")
    registrations.register_settled(first, "k", "loaded")
    registrations.record("k", "stored")
    registrations.record("k", "stored")  # told again: counted once
    registrations.register(second, "k")  # a later pass obtains it again: open there
    registrations.settle("k", "compiled")
    registrations.record("k", "refused")
    one, two = first.reader().compilation, second.reader().compilation
    assert (one.registered, one.loaded, one.stored, one.refused) == (1, 1, 1, 1)
    assert (two.registered, two.compiled, two.stored, two.refused) == (1, 1, 0, 1)
    assert one.settled == one.registered and two.settled == two.registered
    with pytest.raises(ValueError, match="no outcome"):
        registrations.register_settled(first, "j", "measured")
