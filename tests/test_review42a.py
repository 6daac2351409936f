"""Review of leftovers42a (review42a): a late launch under way while its pass's runtime is
retired, a process reopening a bundle locked at its open, key= values wide or cyclic, and
errors that reach the terminal on one line."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from warmcli import Bundle, Kernel, ProcessMode, ProcessModeOverride, Runtime
from warmcli.backends.host.device import HostDevice
from warmcli.execution.statistics import StatisticsCollector
from warmcli.warming import ended

LATE = Kernel("void late(int *x) { x[0] = 7; }", "late", "P")


class HeldHost(HostDevice):
    """The real host device, but a launch from the thread named 'late' is held (until
    `release` is set) where the kernel's key is made, before the bundle is looked up."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        super().__init__()

    @property  # type: ignore[override]
    def arch(self) -> str:
        if threading.current_thread().name == "late" and not self.release.is_set():
            self.entered.set()
            self.release.wait(10)
        return self._arch

    @arch.setter
    def arch(self, value: str) -> None:
        self._arch = value


def _late_launch(rt: Runtime, errors: list[BaseException]) -> threading.Thread:
    def late() -> None:
        try:
            rt.launch(LATE, rt.buffer(1, "int32"))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=late, name="late", daemon=True)
    thread.start()
    return thread


def test_retire_waits_for_a_launch_under_way_before_its_bundle_closes(tmp_path: Path) -> None:
    # A warming pass's runtime (no miss policy): a daemon thread's launch passed the retired
    # gate, held before its bundle lookup while the pass ends and the next one runs.
    Bundle.create(tmp_path / "b.warm").close()
    device, errors = HeldHost(), []
    ending, nxt = StatisticsCollector(), StatisticsCollector()
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE, ending):
        bundle = Bundle.open(tmp_path / "b.warm")
        rt = Runtime(device, bundle, misses=None)
        thread = _late_launch(rt, errors)
        assert device.entered.wait(10)  # past the retired gate, held before its lookup
        threading.Timer(0.3, device.release.set).start()
        started = time.monotonic()
        ended.retire(rt)
        waited = time.monotonic() - started
        bundle.close()  # as a pass closes its bundle once its runtimes are retired
    with ProcessModeOverride(ProcessMode.EXECUTE, nxt):  # the verify pass
        thread.join(10)
    rt.close()
    said = [m.reason for m in nxt.reader().misses()]
    assert said == [], said  # was: 'corrupt: bundle's entry: closed', the verify's own
    assert errors == [] and not thread.is_alive()
    assert waited >= 0.2, waited  # retire waited for the launch under way


def test_a_launch_under_way_past_the_wait_is_noted_and_no_miss_of_the_next_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Held past the wait (a launch that never returns, as far as retire knows): the pass goes
    # on, says so, and what the thread then reads of the closed bundle is no one's miss.
    monkeypatch.setattr(ended, "LATE_WAIT_SECONDS", 0.2)
    Bundle.create(tmp_path / "b.warm").close()
    device, errors = HeldHost(), []
    ending, nxt = StatisticsCollector(), StatisticsCollector()
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE, ending):
        bundle = Bundle.open(tmp_path / "b.warm")
        rt = Runtime(device, bundle, misses=None)
        thread = _late_launch(rt, errors)
        assert device.entered.wait(10)
        started = time.monotonic()
        ended.retire(rt)
        waited = time.monotonic() - started
        bundle.close()
    with ProcessModeOverride(ProcessMode.EXECUTE, nxt):
        device.release.set()  # it goes on now, its bundle closed, the next pass running
        thread.join(10)
    rt.close()
    assert 0.15 <= waited < 5, waited
    notes = ending.reader().notes() + nxt.reader().notes()
    assert nxt.reader().misses() == [] and errors == []
    from warmcli.execution.process_mode import default_collector

    said = [n for n in default_collector().reader().notes() if "thread late still" in n]
    assert said and "0.2 s after its pass ended: not waited for further" in said[0], notes
