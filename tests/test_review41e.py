"""Review of stop 41's review41b/review41d merges: what a pass waits for before it ends (as
Python waits before a process ends), and the headline of a workload error with what is kept.
The real CLI in a subprocess, real SQLite files, the real C compiler.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# A thread of the workload's own (not a daemon) whose name starts with "warm-" (a warm-up
# thread): Python waits for it before the process ends. join_left took every "warm-" thread
# for warm's own and waited for none: its launch landed after the passes (stopped), and warm
# stored 0 kernels and called the bundle complete.
NAMED = """
import threading, time
from warmcli import Kernel
def workload(rt):
    k = Kernel("void named(int *x) { x[0] = 3; }", "named", "P")
    def late():
        time.sleep(0.3)
        rt.launch(k, rt.buffer(1, "int32"))
    threading.Thread(target=late, name="warm-up").start()
"""

# A process pool the workload keeps (a module's), idle once its task returned: Python's exit
# stops its manager thread (not a daemon) without waiting for it; join_left waited for it
# forever, and then, as the worker ended, multiprocessing's exit function waited for its
# process, which only the pool's shut down (threading's exit call, Python's first) ends: a
# hang, the run never ended.
PROCESS_POOL = """
import concurrent.futures
from warmcli import Kernel
POOL = concurrent.futures.ProcessPoolExecutor(1)
def square(n):
    return n * n
def workload(rt):
    k = Kernel("void pp(int *x) { x[0] = 3; }", "pp", "P")
    assert POOL.submit(square, 3).result() == 9
    rt.launch(k, rt.buffer(1, "int32"))
"""


def _stored(bundle: Path) -> list[str]:
    with sqlite3.connect(bundle) as db:
        return sorted(r[0] for r in db.execute("SELECT entry FROM kernels"))


def test_a_workloads_thread_named_warm_something_is_waited_for(
    warm: Warm, workload_file: Path, tmp_path: Path
) -> None:
    bundle = tmp_path / "named.warm"
    run = warm("run", workload_file(NAMED), "-b", bundle, "-d", "host")
    said = run.stdout + run.stderr
    assert run.returncode == 0 and "stopped there" not in said, said
    assert _stored(bundle) == ["named"], said


def test_an_idle_process_pool_the_workload_keeps_is_not_waited_for(
    warm: Warm, workload_file: Path, tmp_path: Path
) -> None:
    bundle = tmp_path / "pp.warm"
    run = warm("run", workload_file(PROCESS_POOL), "-b", bundle, "-d", "host", timeout=40)
    assert run.returncode == 0, run.stdout + run.stderr
    assert _stored(bundle) == ["pp"]


# An exception with no message (queue.Empty(), a bare raise of a class) was said
# 'Empty: ' and, with what is kept after it, 'Empty: ; 1 kernel(s) ...'.
EMPTY = """
import queue
from warmcli import Kernel
CALLS = []
def workload(rt):
    rt.launch(Kernel("void em(int *x) { x[0] = 3; }", "em", "P"), rt.buffer(1, "int32"))
    CALLS.append(1)
    if len(CALLS) == 3:
        raise queue.Empty()
"""


def test_an_exception_without_a_message_is_said_by_its_name_only(
    warm: Warm, workload_file: Path, tmp_path: Path
) -> None:
    run = warm("run", workload_file(EMPTY), "-b", tmp_path / "e.warm", "-d", "host")
    assert run.returncode != 0
    line = run.stderr.strip().splitlines()[-1]
    assert ":9: Empty; 1 kernel(s) and 0 tune(s) stored in" in line, run.stderr
    assert "Empty: " not in run.stderr, run.stderr


def test_a_headline_ending_in_a_colon_with_nothing_after_it_keeps_no_dangling_colon() -> None:
    """Pure logic, a fake report: the kept clause moved before a headline's last colon ends
    the message with a colon opening nothing ('ValueError: bad size; ... are kept:')."""
    from types import SimpleNamespace

    from warmcli.errors import WorkloadError
    from warmcli.warming.sealing import kept_after

    fake = SimpleNamespace(bundle=Path("b.warm"), stored_kernels=1, stored_tunes=0)
    kept = "1 kernel(s) and 0 tune(s) stored in b.warm before it are kept"
    said = str(kept_after(WorkloadError("w.py:8: ValueError: bad size:"), fake))
    assert said == f"w.py:8: ValueError: bad size:; {kept}", said
    # a compile error's log still follows the colon
    said = str(kept_after(WorkloadError("kernel k failed to compile:\nk.c:1: error"), fake))
    assert said == f"kernel k failed to compile; {kept}:\nk.c:1: error", said


# A thread pool task that never ends, left as the workload raised: Python's exit would wait
# for it; the worker, ending at once as before, does not (its process pool's exit call only
# is run, the thread pool's not).
STUCK = """
import concurrent.futures, threading
from warmcli import Kernel
POOL = concurrent.futures.ThreadPoolExecutor(1)
NEVER = threading.Event()
def workload(rt):
    rt.launch(Kernel("void st(int *x) { x[0] = 3; }", "st", "P"), rt.buffer(1, "int32"))
    POOL.submit(NEVER.wait)
    raise ValueError("bad")
"""


def test_a_stuck_pool_task_left_by_a_workload_that_raised_does_not_hold_the_run(
    warm: Warm, workload_file: Path, tmp_path: Path
) -> None:
    run = warm("run", workload_file(STUCK), "-b", tmp_path / "s.warm", "-d", "host", timeout=40)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "ValueError: bad" in run.stderr


# A launch function sizing its block by the GPU's name (a CUDA device's `name`): the pre-build's
# compile-only device has none, so each candidate's check raised AttributeError, every
# candidate was recorded failed and the pre-build failed with TuneFailure, where a GPU (and
# the pre-build before 832f7dd ran launch functions) passes. The question no GPU-less device
# answers says nothing of a GPU: the candidates stay pending, for production to measure.
BY_NAME = r"""
from warmcli import Kernel, Tunable
DEVICE = "cuda"
SRC = 'extern "C" __global__ void z(float *y, int n) { if (threadIdx.x < n) y[threadIdx.x] += V; }'
def launch(rt, k, y, n, *, stream=None):
    block = 256 if "H100" in rt.device.name else 128
    rt.launch(k, y, n, block=block, stream=stream)
T = Tunable("zt", {f"v{v}": Kernel(SRC, "z", "Pi", language="cuda", defines={"V": v})
                   for v in (1, 2)}, launch)
def workload(rt):
    rt.tune(T, rt.buffer(256), 256)
"""


def test_a_launch_function_asking_the_gpus_name_leaves_its_candidates_pending(
    warm: Warm, workload_file: Path, tmp_path: Path
) -> None:
    from warmcli.backends.cuda.nvrtc import find_nvrtc

    if find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
        pytest.skip("NVRTC not installed")
    bundle = tmp_path / "n.warm"
    run = warm("run", workload_file(BY_NAME), "--arch", "sm_90", "-b", bundle, "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    shown = warm("stats", bundle, "--json")
    (tune,) = json.loads(shown.stdout)["tunes"]
    assert [c["status"] for c in tune["candidates"]] == ["pending", "pending"], tune
