"""A tune's candidate whose launch function launches on a stream of its own is timed for real.

`warm run`'s CompileAndAutotune pass switched only the stream a tune measures on to `Execute`: a
launch function that launched on a stream it made (`rt.stream()`) or on `rt.default_stream`
had that launch discarded (compiled, never run), so each candidate's time was the launch
function's Python alone, and the tune picked by noise: a candidate that busy-waits 50 ms and
one that does nothing measured 19.0 and 38.7 us. Now every stream of the device executes the
launches the measuring thread issues while a candidate is measured (other threads' keep their
mode), and a CUDA device's timing events sit on the legacy default stream, which waits for
every blocking stream (`gpu`-marked: skipped here). The real C compiler, the real CLI.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from conftest import Warm, gpu_arch_or_skip

from warmcli import Kernel, Runtime, Tunable
from warmcli.backends.base import StreamMode
from warmcli.backends.host.device import HostDevice
from warmcli.execution import ProcessMode, ProcessModeOverride, StatisticsCollector
from warmcli.execution.stream_mode import StreamModeOverride

SOURCE = """
void work(float *x, int n) {
#if SLOW
    volatile double acc = 0;
    for (long i = 0; i < 20000000L; i++) acc += i * 0.5;   /* tens of ms */
#endif
    for (int i = 0; i < n; i++) x[i] = x[i] + 1;
}"""

# Three slow candidates and one fast one, the fast one neither first nor last: by noise a tune
# picks it one time in four at best.
NAMES = {"slow_a": 1, "slow_b": 1, "fast": 0, "slow_c": 1}
WORKLOAD = f"""
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SOURCE = {SOURCE!r}
SLOW = {NAMES!r}
CANDIDATES = {{n: Kernel(SOURCE, "work", "Pi", defines={{"SLOW": s}}) for n, s in SLOW.items()}}

def launch(rt, kernel, x, n, *, stream=None):
    side = rt.stream()                      # a stream of its own
    rt.launch(kernel, x, n, stream=side)
    side.synchronize()

OWN = Tunable("own_stream", CANDIDATES, launch, warmup=0, repeats=1)

def workload(rt):
    x = rt.upload(np.zeros(16, dtype=np.float32))
    rt.tune(OWN, x, 16)
"""


def _candidates() -> dict[str, Kernel]:
    return {n: Kernel(SOURCE, "work", "Pi", defines={"SLOW": s}) for n, s in NAMES.items()}


def test_warm_run_times_a_launch_on_the_launch_functions_own_stream(
    warm: Warm, tmp_path: Path, bundle_path: Path
) -> None:
    """Failed before the fix: pass 2 executed 0 launches (each candidate's discarded) and the
    pick was any candidate; now its 4 candidates' launches and the pick's run are executed,
    and the pick is the candidate that does nothing."""
    workload = tmp_path / "own_stream.py"
    workload.write_text(WORKLOAD)
    doc = warm.json("run", workload, "--bundle", bundle_path, "--no-verify")
    measuring = doc["passes"][1]
    assert measuring["mode"] == "CompileAndAutotune"
    assert measuring["execution"]["executed"] == len(NAMES), measuring["execution"]
    (tune,) = warm.json("stats", bundle_path)["tunes"]
    assert tune["pick"] == "fast", tune


def _tuned(launch, threads: int = 0) -> tuple[str | None, StatisticsCollector]:
    """`launch` tuned under CompileAndAutotune on the host, its counts."""
    rt = Runtime(HostDevice())
    tunable = Tunable("own", _candidates(), launch, warmup=0, repeats=1)
    x = rt.upload(np.zeros(4, dtype=np.float32))
    collector = StatisticsCollector()
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE, collector):
        pick = rt.tune(tunable, x, 4, stream=rt.stream())
    rt.close()
    return pick, collector


def _counts(collector: StatisticsCollector) -> tuple[int, int]:
    execution = collector.reader().execution
    return execution.executed, execution.discarded


def test_a_launch_on_the_runtimes_default_stream_is_the_candidates_too() -> None:
    """Tuned on a stream of the caller's, a launch function that launches on
    `rt.default_stream`: its launches were discarded (0 executed, the pick by noise);
    now each candidate's one launch executes (the pick's, after, is discarded)."""

    def launch(rt: Runtime, kernel: Kernel, x, n: int, *, stream=None) -> None:
        rt.launch(kernel, x, n, stream=rt.default_stream)

    pick, collector = _tuned(launch)
    assert pick == "fast"
    assert _counts(collector) == (len(NAMES), 1)


def test_another_threads_own_stream_keeps_its_mode_while_a_tune_measures() -> None:
    """Only the measuring thread's launches execute on every stream: a thread the launch
    function starts, launching on a stream of its own, is discarded as before (its work is
    no candidate's: a pass's launches are discarded)."""

    def launch(rt: Runtime, kernel: Kernel, x, n: int, *, stream=None) -> None:
        rt.launch(kernel, x, n, stream=stream)
        other = threading.Thread(target=lambda: rt.launch(kernel, x, n, stream=rt.stream()))
        other.start()
        other.join()

    pick, collector = _tuned(launch)
    assert pick == "fast"
    # each candidate: its launch executed, the other thread's discarded; the pick's both
    assert _counts(collector) == (len(NAMES), len(NAMES) + 2)


def test_every_stream_is_for_execute_only() -> None:
    rt = Runtime(HostDevice())
    with pytest.raises(ValueError, match="Execute only"):
        StreamModeOverride(rt.default_stream, StreamMode.DISCARD, every_stream=True)
    rt.close()


CUDA_SOURCE = r"""
extern "C" __global__ void work(float *x, int n) {
#if SLOW
    long long start = clock64();
    while (clock64() - start < 200000000LL) { }              /* ~0.1 s of a GPU's clock */
#endif
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += 1.0f;
}
"""


@pytest.mark.gpu
def test_cuda_times_a_launch_on_the_launch_functions_own_stream() -> None:
    """On a GPU the launch went out on a stream of its own, async: events recorded on the
    measured stream spanned none of it (and under a warming pass it was discarded too).
    Reasoned fix: events on the legacy default stream, every stream executing for the
    measuring thread. Skipped without a GPU."""
    gpu_arch_or_skip()
    from warmcli.backends.cuda.device import CudaDevice

    candidates = {
        n: Kernel(CUDA_SOURCE, "work", "Pi", language="cuda", defines={"SLOW": s})
        for n, s in NAMES.items()
    }

    def launch(rt: Runtime, kernel: Kernel, x, n: int, *, stream=None) -> None:
        side = rt.stream()  # no synchronize: the timing must wait for it
        rt.launch(kernel, x, n, grid=1, block=32, stream=side)

    rt = Runtime(CudaDevice(0))
    x = rt.upload(np.zeros(32, dtype=np.float32))
    for mode in (ProcessMode.COMPILE_AND_AUTOTUNE, ProcessMode.EXECUTE):  # a pass, production
        tunable = Tunable(f"own_{mode.value}", candidates, launch, warmup=0, repeats=1)
        with ProcessModeOverride(mode, StatisticsCollector()):
            assert rt.tune(tunable, x, 32) == "fast"
    rt.close()


def test_a_buffer_written_on_the_launch_functions_own_stream_is_put_back() -> None:
    """A tune measuring in an executing process (production, a miss): a launch function that
    adds 1 to a buffer the app keeps (none of the inputs), on a stream it made, left it
    applied once per run of every candidate, 4 x (1 warm-up + 3 timed) + the pick's: 17, where
    one run makes 1 (the guard kept only what was launched on the measured stream). Now every
    stream shows the measuring thread's launches to the guard: 1."""
    rt = Runtime(HostDevice())
    kept = rt.upload(np.zeros(4, dtype=np.float32))

    def launch(rt: Runtime, kernel: Kernel, x, n: int, *, stream=None) -> None:
        rt.launch(kernel, kept, n, stream=rt.stream())

    tunable = Tunable("kept_own", _candidates(), launch, warmup=1, repeats=3)
    with ProcessModeOverride(ProcessMode.EXECUTE):
        rt.tune(tunable, rt.upload(np.zeros(4, dtype=np.float32)), 4)
        assert rt.read(kept).tolist() == [1.0] * 4
    rt.close()


def test_a_buffer_written_on_a_stream_another_threads_tune_measures_on_is_put_back() -> None:
    """Two threads tuning at once (production misses): thread B measures on
    `rt.default_stream`, whose own hooks (B's) hid every stream's (A's, `watch_every`) from
    A's launch function launching there, on a buffer the app keeps: A's guard never kept it,
    and it was left applied once per run, 2 x (1 warm-up + 3 timed) + the pick's: 9, where
    one run makes 1 (review62a). Now a thread with no cover on that stream finds its own."""
    rt = Runtime(HostDevice())
    kept = rt.upload(np.zeros(4, dtype=np.float32))
    inside, done = threading.Event(), threading.Event()

    def launch_b(rt: Runtime, kernel: Kernel, x, n: int, *, stream=None) -> None:
        rt.launch(kernel, x, n, stream=stream)
        inside.set()  # B measures on the default stream until A's tune is done
        done.wait(60)

    def launch_a(rt: Runtime, kernel: Kernel, x, n: int, *, stream=None) -> None:
        rt.launch(kernel, kept, n, stream=rt.default_stream)

    two = dict(list(_candidates().items())[:2])
    b = Tunable("b_default", two, launch_b, warmup=0, repeats=1)
    a = Tunable("a_kept", two, launch_a, warmup=1, repeats=3)
    with ProcessModeOverride(ProcessMode.EXECUTE):
        zeros = rt.upload(np.zeros(4, dtype=np.float32))
        other = threading.Thread(target=lambda: rt.tune(b, zeros, 4))
        other.start()
        try:
            assert inside.wait(60)
            rt.tune(a, rt.upload(np.zeros(4, dtype=np.float32)), 4, stream=rt.stream())
            assert rt.read(kept).tolist() == [1.0] * 4
        finally:
            done.set()
            other.join()
    rt.close()
