"""A workload author's trial (stop 52): workloads that launch and tune from threads, asyncio
and pools (a `ThreadPoolExecutor` of 8 tuning one key and several, `asyncio.run` over
`to_thread`, daemon threads still tuning as the entry returns, a thread that raises, one
started at import, a `threading.local` runtime, a stream a thread), warmed with `warm run`,
served with `WARM_STRICT=1` and run cold: the same bytes, every kernel and tune stored once,
nothing compiled or tuned in production. Real cc, real SQLite bundles, the real CLI (forked).
What it found:
- a daemon thread's tune still being measured as the entry returned was lost: the
  CompileAndAutotune pass stored its kernels before that tune's record was made (`stored 2
  new kernel(s) and 0 new tune(s)`; about 1 run in 4 of a workload whose 3 daemon threads tune
  in a loop), the README's wait for "a launch or tune it had under way as the pass ended" made
  only once the runtime retired, after the store. And a verify pass whose workload returned
  while such a tune was measured called the bundle complete (exit 0) without it, its
  statistics read before the tune settled. Each pass now waits for the launches and tunes
  other threads have under way on its runtimes (10 s at most, as retiring does) before it
  stores or is judged.
- eight threads meeting one tune the bundle lacks each measured it, at once (a pool of 8 over
  one shape: `measured 1` beside `candidates 32` for a tunable of 4 candidates), each thread's
  timings taken while the others ran theirs, each taking a pick of its own (two picks in one
  process), the last one stored: the kernel cache compiles a kernel once under its lock, a tune
  had nothing alike. One thread measures it now (`warmcli.runtime.tune_flight`); the others wait
  and take its pick, a hit; a wait that would close a loop (tunes nested in each other's launch
  functions in two threads) measures at once instead.
- a daemon thread that launched a kernel not built yet as its process's `__main__` returned
  (writing back to an empty bundle: 1 exit in 5) raised `RuntimeError: cannot schedule new
  futures after interpreter shutdown` from warm's compile pool, a traceback through warm's batch
  compiler: Python's shutdown stops its pools taking work before its main thread ends, which is
  all the batch compiler looked at. A group no pool takes is compiled in the caller's thread
  now.
- an `asyncio.TaskGroup` whose `to_thread` task launched with an argument short failed the run
  with the group's line alone, `ExceptionGroup: unhandled errors in a TaskGroup (1
  sub-exception)`, nothing saying what went wrong nor where (warm says one line where Python
  shows the traceback of each): the line names the first error the group holds now, and where.
- a run whose one thread raised before it launched (a buffer for an `int`) ended with `the
  workload launched nothing and tuned nothing in this process (what a process it starts
  launches ... is not seen)`, pointing at processes the workload never made: it adds that a
  thread of it raised before, as the notes above it say.
"""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import Kernel, Runtime, Tunable
from warmcli.backends.host import HostDevice
from warmcli.execution import ProcessMode, ProcessModeOverride

# A daemon thread tunes; the entry returns once it is measuring (each candidate's launch
# sleeps 50 ms: 2 candidates x 3 launches, 0.3 s under way as the pass ends). The event
# makes it deterministic: no race is left to chance, so one run catches it.
LATE_TUNE = """
import threading, time
import numpy as np
from warmcli import Kernel, Tunable

SRC = "void inc(float *x, int n) { for (int i = 0; i < n; i++) x[i] += STEP; }"
MEASURING = threading.Event()

def slow(rt, kernel, x, n, *, stream=None):
    MEASURING.set()
    time.sleep(0.05)
    rt.launch(kernel, x, n, stream=stream)

INC = Tunable("inc", {f"s{s}": Kernel(SRC, "inc", "Pi", defines={"STEP": s}) for s in (1, 2)},
              slow, warmup=1, repeats=2, restore=())
CANDIDATES = list(INC.candidates.values())

def workload(rt):
    MEASURING.clear()
    x = rt.upload(np.zeros(4, dtype=np.float32))
    t = threading.Thread(target=rt.tune, args=(INC, x, 4), daemon=True, name="tuner")
    t.start()
    while t.is_alive() and not MEASURING.wait(0.005):  # CompileOnly only queues: it ends
        pass
"""


def test_a_daemon_threads_tune_under_way_as_the_entry_returns_is_stored(
    warm, tmp_path: Path
) -> None:
    (tmp_path / "late.py").write_text(LATE_TUNE)
    bundle = tmp_path / "b.warm"
    proc = warm("run", tmp_path / "late.py", "-b", bundle, "--json", "--no-verify", timeout=120)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    run = json.loads(proc.stdout)
    assert run["stored"] == {"kernels": 2, "tunes": 1}, run["stored"]  # was 2 and 0
    tuned = run["passes"][1]["autotune"]
    assert (tuned["measured"], tuned["persisted"]) == (1, 1), tuned  # was 0 and 0
    # The bundle without that tune: a verify whose entry returns as it is measured says so.
    cleaned = warm("clean", bundle, "--tune", "inc")
    assert cleaned.returncode == 0, cleaned.stderr
    proc = warm("verify", bundle, "--workload", tmp_path / "late.py", "-q", timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out  # was 0: "the bundle is complete"
    assert "miss: tune inc float32[4] 4" in out, out


# Eight threads meet one tune at once, none in the bundle (each candidate's launch sleeps 20 ms,
# so the first measuring lasts past every thread's lookup: no race left to chance).
SRC = "void add(float *x, int n) { for (int i = 0; i < n; i++) x[i] += STEP; }"


def _tunable(name: str, calls: list[str], then=None) -> Tunable:
    def launch(rt, kernel, x, n, *, stream=None):
        calls.append(threading.current_thread().name)
        if then is not None:
            then(rt, stream)
        time.sleep(0.02)
        rt.launch(kernel, x, n, stream=stream)

    steps = {f"s{s}": Kernel(SRC, "add", "Pi", defines={"STEP": s}) for s in (1, 2)}
    return Tunable(name, steps, launch, warmup=1, repeats=1, restore=())


@pytest.fixture(scope="module")
def rt():
    """One host runtime, no bundle: its kernels built once for this module's tunes."""
    runtime = Runtime(HostDevice(), None, misses=None)
    yield runtime
    runtime.close()


def test_threads_that_miss_one_tune_at_once_measure_it_once(rt: Runtime) -> None:
    calls: list[str] = []
    tunable, go = _tunable("add8", calls), threading.Barrier(8)

    def one(_: int) -> str | None:
        x = rt.upload(np.zeros(4, np.float32))
        go.wait(30)
        return rt.tune(tunable, x, 4, stream=rt.stream())

    with ProcessModeOverride(ProcessMode.EXECUTE) as collector, ThreadPoolExecutor(8) as pool:
        picks = list(pool.map(one, range(8), timeout=60))
    tuned = collector.reader().autotune
    # measured once, its 2 candidates; 7 hits (was: 8 measured at once, 16 candidates, 0 hits)
    assert (tuned.measured, tuned.candidates_measured, tuned.hits) == (1, 2, 7), tuned
    assert len(set(picks)) == 1, picks  # was each thread's own pick
    assert len(calls) == 2 * 2 + 8, calls  # warm-up and a run of each candidate, then 8 picks


def test_two_threads_whose_tunes_nest_each_in_the_other_do_not_wait_for_ever(rt: Runtime) -> None:
    # Thread a measures X, whose launch function tunes Y; b measures Y, whose launch function
    # tunes X: waiting for each other's would never end, so one of them measures at once.
    both, calls = threading.Barrier(2), []
    holder: dict[str, Tunable] = {}

    def nested(other: str, mine: str):
        def then(rt, stream):
            if threading.current_thread().name == mine and len(calls) <= 2:
                both.wait(30)  # each measures its own by now
                rt.tune(holder[other], rt.upload(np.zeros(4, np.float32)), 4, stream=stream)

        return then

    holder["x"] = _tunable("x", calls, nested("y", "a"))
    holder["y"] = _tunable("y", calls, nested("x", "b"))
    errors: list[Exception] = []

    def run(name: str) -> None:
        try:
            rt.tune(holder[name], rt.upload(np.zeros(4, np.float32)), 4, stream=rt.stream())
        except Exception as exc:  # said below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(n,), name=t) for n, t in (("x", "a"), ("y", "b"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "the nested tunes waited for each other"
    assert errors == [], errors


# What Python's shutdown runs first, before its main thread ends (`threading._shutdown`: the
# pools' exit, `concurrent.futures.thread._python_exit`), called as it calls it: a daemon thread
# that launches a kernel not built yet meets this state while the main thread exits.
SHUTTING_DOWN = """
import json
import concurrent.futures.thread as pools
import numpy as np
import warmcli
from warmcli import Kernel

rt = warmcli.runtime("host")
x = rt.upload(np.zeros(3, np.float32))
pools._python_exit()  # from here on no pool takes new work, as in Python's shutdown
rt.launch(Kernel("void late(float *x, int n) { for (int i = 0; i < n; i++) x[i] = 7; }",
                 "late", "Pi"), x, 3)
print(json.dumps(rt.read(x).tolist()))
"""


def test_a_compile_as_pythons_shutdown_begins_is_made_in_the_callers_thread(warm) -> None:
    # was: RuntimeError: cannot schedule new futures after interpreter shutdown, raised from
    # warm's compile pool into the daemon thread's launch (1 exit in 5 of a workload whose
    # daemon threads launch as its __main__ returns, cold or writing back)
    assert warm.production(SHUTTING_DOWN) == [7.0, 7.0, 7.0]


# An asyncio workload whose TaskGroup's thread task launches with an argument short.
TASK_GROUP = """
import asyncio
import numpy as np
from warmcli import Kernel

K = Kernel("void k(float *x, const float *y, int n) { x[0] = y[0] + n; }", "k", "PPi")

def bad(rt):
    x = rt.upload(np.zeros(4, np.float32))
    rt.launch(K, x, 4)

async def workload(rt):
    async with asyncio.TaskGroup() as tg:
        tg.create_task(asyncio.to_thread(bad, rt))
"""


def test_an_exception_groups_line_names_what_it_holds(warm, tmp_path: Path) -> None:
    (tmp_path / "tg.py").write_text(TASK_GROUP)
    proc = warm("run", tmp_path / "tg.py", "-b", tmp_path / "b.warm", "-q", timeout=120)
    assert proc.returncode == 2, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("warm: error:")]
    # was the group's line alone: "... ExceptionGroup: unhandled errors in a TaskGroup
    # (1 sub-exception)", nothing saying what the launch got wrong, nor where
    held = f"(holding {tmp_path / 'tg.py'}:10: LaunchError: kernel k takes 3 argument(s)"
    assert "ExceptionGroup: unhandled errors in a TaskGroup (1 sub-exception) " + held in line
    assert "Traceback" not in proc.stderr


def test_a_run_whose_only_launch_was_a_raising_threads_says_so(warm, tmp_path: Path) -> None:
    # was: "the workload launched nothing and tuned nothing in this process (what a process
    # it starts launches ... is not seen)" alone, pointing at processes the workload never made
    feeder = "t = threading.Thread(target=bad, args=(rt,), name='feeder'); t.start(); t.join()"
    made = (
        "import threading" + TASK_GROUP.split("async def")[0] + f"def workload(rt):\n    {feeder}\n"
    )
    (tmp_path / "t.py").write_text(made)
    proc = warm("run", tmp_path / "t.py", "-b", tmp_path / "b.warm", "-q", timeout=120)
    assert proc.returncode == 0, proc.stderr
    said = [x for x in proc.stdout.splitlines() if "launched nothing and tuned nothing" in x]
    assert said and said[0].endswith("; a thread of it raised before, as the notes above say")
    assert "note: thread feeder raised during CompileOnly" in proc.stdout, proc.stdout
