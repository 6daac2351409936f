"""Statistics read from another thread while a real pass runs."""

from __future__ import annotations

import threading
import time

from warmcli import Kernel, ProcessMode, ProcessModeOverride, Runtime, StatisticsCollector
from warmcli.backends.host import HostDevice
from warmcli.execution.snapshots import DeviceStatistics


def test_counters_are_exact_under_concurrent_counting() -> None:
    """Pure logic: eight threads counting at once lose nothing."""
    collector = StatisticsCollector()

    def hammer() -> None:
        for _ in range(2000):
            collector.count("d", "execution", "executed")
            collector.count("d", "compilation", "seconds", 0.5)

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reader = collector.reader()
    assert reader.execution.executed == 16000
    assert reader.compilation.seconds == 8000.0


def test_reader_sees_a_pass_progress_from_another_thread() -> None:
    kernels = [
        Kernel(f"void k(float *x) {{ x[0] += {i}; }}", "k", "P", defines={"I": i})
        for i in range(12)
    ]
    rt = Runtime(HostDevice(), jobs=2)
    buf = rt.buffer(1)
    collector = StatisticsCollector()
    reader = collector.reader()
    seen: list[DeviceStatistics] = []
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            seen.append(reader.total())
            time.sleep(0.001)

    poller = threading.Thread(target=poll)
    poller.start()
    with ProcessModeOverride(ProcessMode.COMPILE_ONLY, collector):
        for k in kernels:
            rt.launch(k, buf)
            time.sleep(0.01)
    done.set()
    poller.join()
    queued = [s.compilation.queued for s in seen]
    assert queued == sorted(queued), "counts only grow"
    assert len(set(queued)) > 0 and max(queued) <= 12
    assert any(0 < q < 12 for q in queued), "the reader saw the pass half way"
    assert reader.per_device()["host"].compilation.queued == 12
    rt.close()
