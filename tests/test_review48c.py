"""Review 48c (of the worker's `faulthandler`, 1be81f59): what it found, each through the real CLI.

- A tune candidate whose launcher runs the kernel in another thread (one it starts and joins,
  or a thread pool's) crashed the worker in a thread that measured nothing: the crash was said
  to be outside tuning, exit 2, nothing stored (before 1be81f59 the candidate was excluded and
  the run went on). A thread measuring nothing that crashed in `Runtime.launch` (its frames,
  as `faulthandler` says them) now names the measurement begun last.
- Warm's `faulthandler` was on from the worker's start: a workload's test suite run by
  `pytest.main` saw it enabled (its faulthandler plugin) and, as its session ended, turned one
  on for standard error in its place, so a later crash of the workload printed Python's
  "Fatal Python error" dump, which no run printed before 1be81f59 (and warm's own was gone).
  And a process the workload forked had `faulthandler` disabled, the workload's own (enabled
  at import) too: its crash printed no dump. Warm's `faulthandler` is now on only while a
  measurement is under way and no other is enabled, and turned off in a forked process only
  where it is still warm's.
- A crash of the workload's own thread outside any launch, while another thread measures, is
  still said as outside tuning: no candidate of the other thread is excluded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

HEAD = """
import ctypes, faulthandler, os, threading, time
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = '''
#include <unistd.h>
void k(float *x, int n) {
#if MODE == 1
    *(volatile int *)0 = 1;
#elif MODE == 2
    usleep(DELAY);
#endif
    for (int i = 0; i < n; i++) x[i] += 1.0f;
}'''
L = lambda rt, k, x, n, stream=None: rt.launch(k, x, n, stream=stream)


def kernel(mode, delay=0, tag=0):
    return Kernel(SRC, "k", "Pi", defines={"MODE": mode, "DELAY": delay, "TAG": tag})
"""

LAUNCHED_IN_A_THREAD = (
    HEAD
    + """
def in_a_thread(rt, k, x, n, stream=None):
    t = threading.Thread(target=rt.launch, args=(k, x, n), kwargs={"stream": stream})
    t.start()
    t.join()


CRASHY = Tunable("crashy", {"segv": kernel(1), "fine": kernel(0)}, in_a_thread, warmup=0, repeats=1)


def workload(rt):
    rt.tune(CRASHY, rt.buffer(16), 16)
"""
)


LAUNCHED_IN_A_POOL = LAUNCHED_IN_A_THREAD.replace(
    """def in_a_thread(rt, k, x, n, stream=None):
    t = threading.Thread(target=rt.launch, args=(k, x, n), kwargs={"stream": stream})
    t.start()
    t.join()
""",
    """from concurrent.futures import ThreadPoolExecutor

POOL = ThreadPoolExecutor(1)
POOL.submit(int).result()  # its thread begun before any measurement


def in_a_thread(rt, k, x, n, stream=None):
    POOL.submit(rt.launch, k, x, n, stream=stream).result()
""",
)


@pytest.mark.parametrize("source", [LAUNCHED_IN_A_THREAD, LAUNCHED_IN_A_POOL], ids=["own", "pool"])
def test_a_candidate_launched_from_another_thread_is_named_when_it_crashes(
    warm: Warm, workload_file, bundle_path: Path, source: str
) -> None:
    assert LAUNCHED_IN_A_POOL != LAUNCHED_IN_A_THREAD
    proc = warm("run", workload_file(source), "-b", bundle_path, "--json")
    assert proc.returncode == 0, proc.stderr
    assert "candidate segv crashed (SIGSEGV); it is excluded" in proc.stderr
    [tune] = warm.json("stats", bundle_path)["tunes"]
    assert tune["pick"] == "fine"


MAIN_THREAD_CRASHES_WHILE_ANOTHER_MEASURES = (
    HEAD
    + """
SLOW = Tunable("slow", {"s0": kernel(2, 300000, 1), "s1": kernel(2, 300000, 2)}, L,
               warmup=0, repeats=1)
PASSES = []


def workload(rt):
    PASSES.append(1)
    t = threading.Thread(target=rt.tune, args=(SLOW, rt.buffer(16), 16))
    t.start()
    if len(PASSES) == 2:  # the tuning pass: the workload's own crash, while slow is measured
        time.sleep(0.15)
        ctypes.string_at(0)
    t.join()
"""
)


def test_a_crash_outside_a_launch_while_another_thread_measures_is_outside_tuning(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    workload = workload_file(MAIN_THREAD_CRASHES_WHILE_ANOTHER_MEASURES)
    proc = warm("run", workload, "-b", bundle_path, "--json")
    assert proc.returncode == 2, proc.stderr
    assert "excluded" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["error"].startswith(
        "the workload crashed (SIGSEGV) during CompileAndAutotune"
    )


TEST_SUITE = """
def test_tunes():
    import warmcli
    from workload import FAST
    rt = warmcli.runtime()
    rt.tune(FAST, rt.buffer(16), 16)
"""

SUITE_THEN_CRASH = (
    HEAD
    + """
import pytest

FAST = Tunable("fast", {"a": kernel(0, tag=1), "b": kernel(0, tag=2)}, L, warmup=0, repeats=1)
PASSES = []


def workload(rt):
    PASSES.append(1)
    here = os.path.dirname(os.path.abspath(__file__))
    suite = os.path.join(here, "t_suite.py")
    pytest.main(["-q", "-p", "no:cacheprovider", "--rootdir", here, suite])
    if len(PASSES) == 2:  # after the suite: the workload's own crash, outside tuning
        ctypes.string_at(0)
"""
)


def test_a_suite_run_by_pytest_leaves_no_faulthandler_on_standard_error(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    workload_file(TEST_SUITE, "t_suite.py")
    proc = warm("run", workload_file(SUITE_THEN_CRASH), "-b", bundle_path, "--json")
    assert proc.returncode == 2, proc.stderr
    assert "Fatal Python error" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["error"].startswith(
        "the workload crashed (SIGSEGV) during CompileAndAutotune"
    )


FORKED_CHILD_WITH_ITS_OWN_FAULTHANDLER = (
    HEAD
    + """
faulthandler.enable()
FAST = Tunable("fast", {"a": kernel(0, tag=1), "b": kernel(0, tag=2)}, L, warmup=0, repeats=1)


def workload(rt):
    rt.tune(FAST, rt.buffer(16), 16)
    pid = os.fork()
    if pid == 0:
        ctypes.string_at(0)
    os.waitpid(pid, 0)
"""
)


def test_a_forked_child_keeps_the_workloads_own_faulthandler(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    workload = workload_file(FORKED_CHILD_WITH_ITS_OWN_FAULTHANDLER)
    proc = warm("run", workload, "-b", bundle_path, "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("Fatal Python error: Segmentation fault") == 3, proc.stderr
