"""Review 48a (of the worker journal in memory, 77661210): what it found, each through the real CLI.

- A tune candidate measured in a process the workload forked left its "begin" line in the
  worker's journal when that process died measuring it; the worker's later measurements each
  cut their own line off again, so that stale line stayed the journal's last, and a crash of
  the worker outside any measurement was blamed on the child's candidate: excluded, the passes
  run again, before the crash was said for what it was. A forked process's crash is not the
  worker's: its measurements are journaled no more.
- Threads measuring at once: one thread's measurement ending wrote an "end" line that read as
  the end of every measurement, so a candidate another thread was measuring when it crashed
  the worker was not named, and the run failed (before 77661210 too). Each measurement under
  way is now journaled by itself, and a crash names the one that was.
- Threads measuring at once, the candidate begun last blamed: a crash in one thread's
  measurement excluded another thread's candidate, under way then, as `crashed (SIGSEGV)`
  (every one of its candidates in turn, its tune then failing), before the culprit (before
  77661210 too). The worker's `faulthandler` now says which thread crashed it, into the journal.
- Where `os.memfd_create` is missing, the journal is a temporary file (forced here): a crashing
  candidate is still named and excluded, and nothing is left in `TMPDIR`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

SRC = """
SRC = '''
#include <unistd.h>
void k(float *x, int n) {
#if MODE == 1
    usleep(DELAY); *(volatile int *)0 = 1;
#elif MODE == 2
    usleep(DELAY);
#endif
    for (int i = 0; i < n; i++) x[i] += 1.0f;
}'''
L = lambda rt, k, x, n, stream=None: rt.launch(k, x, n, stream=stream)


def kernel(mode, delay=0, tag=0):
    return Kernel(SRC, "k", "Pi", defines={"MODE": mode, "DELAY": delay, "TAG": tag})


CRASHY = Tunable(
    "crashy", {"segv": kernel(1, DELAY_SEGV), "fine": kernel(0)}, L, warmup=0, repeats=1
)
"""

FORKED_CHILD_CRASHES = (
    """
import ctypes, os
from warmcli import Kernel, Tunable

DEVICE = "host"
DELAY_SEGV = 0
"""
    + SRC
    + """
FAST = Tunable("fast", {"a": kernel(0, tag=1), "b": kernel(0, tag=2)}, L, warmup=0, repeats=1)
PASSES = []


def workload(rt):
    PASSES.append(1)
    x = rt.buffer(16)
    pid = os.fork()
    if pid == 0:  # measures segv first, and dies of it (its own crash, not the worker's)
        rt.tune(CRASHY, x, 16)
        os._exit(0)
    os.waitpid(pid, 0)
    rt.tune(FAST, x, 16)
    if len(PASSES) == 2:  # the tuning pass: the workload's own crash, outside any measurement
        ctypes.string_at(0)
"""
)


def test_a_forked_childs_crash_mid_measurement_is_not_blamed_for_the_workers_own(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    proc = warm("run", workload_file(FORKED_CHILD_CRASHES), "-b", bundle_path, "--json")
    assert proc.returncode == 2, proc.stderr
    assert "excluded" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout) == {
        "error": f"the workload crashed (SIGSEGV) during CompileAndAutotune: nothing was "
        f"stored in {bundle_path}",
        "exit": 2,
    }


THREADS = (
    """
import threading, time
from warmcli import Kernel, Tunable

DEVICE = "host"
DELAY_SEGV = 800000
"""
    + SRC
    + """
SLOW = Tunable(
    "slow", {"s0": kernel(2, 60000, 1), "s1": kernel(2, 60000, 2)}, L, warmup=0, repeats=1
)


def workload(rt):
    x, y, z = rt.buffer(16), rt.buffer(16), rt.buffer(16)

    def slow(buf, n, delay):
        time.sleep(delay)
        rt.tune(SLOW, buf, n)

    threads = [
        threading.Thread(target=rt.tune, args=(CRASHY, x, 16)),
        threading.Thread(target=slow, args=(y, 16, 0.1)),
        threading.Thread(target=slow, args=(z, 8, 0.13)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
"""
)


def test_a_candidate_crashing_while_other_threads_measure_is_named_and_excluded(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    proc = warm("run", workload_file(THREADS), "-b", bundle_path, "--json")
    assert proc.returncode == 0, proc.stderr
    assert "candidate segv crashed (SIGSEGV); it is excluded" in proc.stderr
    assert json.loads(proc.stdout)["stored"]["tunes"] == 3
    tunes = {t["operation"]: t for t in warm.json("stats", bundle_path)["tunes"]}
    assert tunes["crashy"]["pick"] == "fine"


ANOTHER_THREAD_BEGUN_LAST = THREADS.replace("DELAY_SEGV = 800000", "DELAY_SEGV = 300000").replace(
    'kernel(2, 60000, 1), "s1": kernel(2, 60000, 2)',
    'kernel(2, 500000, 1), "s1": kernel(2, 500000, 2)',
)


def test_a_crash_blames_the_candidate_of_the_thread_it_was_in_not_the_last_begun(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    assert ANOTHER_THREAD_BEGUN_LAST != THREADS
    proc = warm("run", workload_file(ANOTHER_THREAD_BEGUN_LAST), "-b", bundle_path, "--json")
    assert proc.returncode == 0, proc.stderr
    excluded = [line for line in proc.stderr.splitlines() if "excluded" in line]
    assert excluded == [
        "warm: tune crashy float32[16] 16: candidate segv crashed (SIGSEGV); it is excluded "
        "and the passes run again"
    ]
    tunes = {t["operation"]: t for t in warm.json("stats", bundle_path)["tunes"]}
    assert tunes["crashy"]["pick"] == "fine"
    assert all(c["status"] == "ok" for c in tunes["slow"]["candidates"]), tunes["slow"]


NO_MEMFD = """
import os, runpy, sys
del os.memfd_create
sys.argv[0] = "warm"
runpy.run_module("warmcli", run_name="__main__")
"""

CRASHING = (
    """
from warmcli import Kernel, Tunable

DEVICE = "host"
DELAY_SEGV = 0
"""
    + SRC
    + """
def workload(rt):
    rt.tune(CRASHY, rt.buffer(16), 16)
"""
)


def test_without_memfd_create_the_journal_is_a_temporary_file_and_still_names_a_crash(
    warm: Warm, workload_file, bundle_path: Path, tmp_path: Path
) -> None:
    wrapper = workload_file(NO_MEMFD, "no_memfd.py")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.run(
        [sys.executable, str(wrapper), "run", str(workload_file(CRASHING)), "-b", str(bundle_path)],
        capture_output=True,
        text=True,
        env=dict(warm.env, TMPDIR=str(tmp)),
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "candidate segv crashed (SIGSEGV); it is excluded" in proc.stderr
    [tune] = warm.json("stats", bundle_path)["tunes"]
    assert tune["pick"] == "fine"
    assert list(tmp.iterdir()) == []
