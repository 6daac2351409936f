"""Review of review43b's process-level changes (the stop signals of a pass's forked children,
the kept status's C `exit`, a process pool task's failure found by its sending frame): a `fork`
process pool's task that caught a GPU-less pre-build's refusal and raised another error from it
(or while handling it) passed the run, where a thread pool's task doing so fails it: only the
error a task raised crosses to the parent, pickled without its `__cause__` or `__context__`, so
the refusal in its chain never arrived; a stop sent to `warm run` as the workload forked was
held by the fork's mask and answered as warm's at-fork function unblocked it, where Python only
prints what a handler raises ("Exception ignored ... KeyboardInterrupt"): the workload went on
until the supervisor killed it 2 s later (2 of 10 runs of a workload forking in a loop).
A child a workload's thread forked while warm's main thread held the stops (`held_interrupts`,
a commit) kept the hold's handler, which only notes a signal: SIGTERM never ended it (as in a
pool's `terminate`). Also kept here: a child the workload forks that execs a program (which
inherits its signal mask) still dies of SIGTERM, however it was started.
The real CLI in subprocesses, the real C compiler, NVRTC for a named arch (no GPU)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(tmp: Path, name: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    return subprocess.run(
        [sys.executable, "-m", "warmcli", "run", name, "-b", "r.warm", "-q", *args],
        env=dict(base, PYTHONPATH=str(ROOT), WARM_HOME=str(tmp / "home"), **env),
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=90,
    )


# A fork process pool's task meets the refusal (a call that needs a GPU) and raises another
# error from it or while handling it; the pool's outcome is waited for, never read.
CHAINED = """
import concurrent.futures
import multiprocessing as mp
import os

import pycuda.autoinit  # noqa: F401
import pycuda.driver as drv


def work(i):
    try:
        drv.get_driver_version()
    except RuntimeError as e:
        if os.environ["HOW"] == "from":
            raise ValueError("wrapped") from e
        raise ValueError("while handling")


def main():
    ctx = mp.get_context("fork")
    if os.environ["KIND"] == "pool":
        with ctx.Pool(2) as pool:
            pool.map_async(work, range(2), error_callback=lambda e: print("called back")).wait()
        return
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        futures = [pool.submit(work, i) for i in range(2)]
    concurrent.futures.wait(futures)
    print("kept:", sorted(vars(futures[0].exception())))
"""


@pytest.mark.parametrize(("how", "kind"), [("from", "executor"), ("during", "pool")])
def test_a_process_pool_task_ended_by_an_error_chained_on_the_refusal_fails_the_run(
    tmp_path: Path, how: str, kind: str
) -> None:
    (tmp_path / "chained.py").write_text(CHAINED)
    args = ("--entry", "main", "--pycuda", "--arch", "sm_80")
    done = _run(tmp_path, "chained.py", *args, HOW=how, KIND=kind)
    # as a thread pool's task's (was 0: the refusal, in the error's chain, never crossed)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "in a task of a process pool: DeviceError: " in done.stderr, done.stderr
    if kind == "executor":  # the error the workload reads carries the refusal along, nothing else
        assert "kept: ['_warm_refused']" in done.stdout, done.stdout


# A child the workload forks (from the main thread or another) that execs a program, and the
# workload's own subprocesses: each dies of SIGTERM (a stop blocked across the fork would be
# inherited by the exec'd program's mask: unkillable).
EXECS = """
import os, signal, subprocess, threading, time
from warmcli import Kernel

DEVICE = "host"


def ended(pid):
    time.sleep(0.3)
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return False


def forked():
    pid = os.fork()
    if pid == 0:
        os.execvp("sleep", ["sleep", "30"])
    return pid


def workload(rt):
    o = rt.buffer(4, "float64")
    rt.launch(Kernel("void own(double *o, int n) { o[0] = 2; }", "own", "Pi"), o, 4)
    box = []
    thread = threading.Thread(target=lambda: box.append(forked()))
    thread.start()
    thread.join()
    said = [ended(forked()), ended(box[0])]
    said.append(ended(subprocess.Popen(["sleep", "30"], preexec_fn=lambda: None).pid))
    said.append(ended(os.posix_spawnp("sleep", ["sleep", "30"], os.environ)))
    print("ended by SIGTERM:", said)
"""


def test_a_forked_child_that_execs_a_program_dies_of_sigterm(tmp_path: Path) -> None:
    (tmp_path / "execs.py").write_text(EXECS)
    done = _run(tmp_path, "execs.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ended by SIGTERM: [True, True, True, True]" in done.stdout, done.stdout


# A stop sent as the workload forks, held by the fork's mask (here by an at-fork function that
# runs inside it: registered before warm's, it runs after warm's blocks the stops).
STOP_IN_A_FORK = """
import os, signal, sys, time
os.register_at_fork(before=lambda: os.kill(os.getpid(), signal.SIGTERM))
from warmcli.warming import child_signals


def handler(signum, frame):
    raise KeyboardInterrupt


signal.signal(signal.SIGTERM, handler)
child_signals.watch(handler)
try:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    time.sleep(5)
    print("went on")
except KeyboardInterrupt:
    print("stopped")
"""


def test_a_stop_sent_as_the_workload_forks_stops_it(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", STOP_IN_A_FORK],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=30,
    )
    # was "went on" and "Exception ignored in: <function <lambda> ...": the handler ran in the
    # at-fork function that unblocked it, where Python only prints what it raises
    assert done.stdout == "stopped\n", done.stdout + done.stderr
    assert done.stderr == "", done.stderr


# A thread of the workload forks while warm's main thread holds the stops (a commit of what the
# pass stored: `held_interrupts`), the child sent SIGTERM (a pool's `terminate`).
FORKED_IN_A_HOLD = """
import os, signal, threading, time
from warmcli.warming import child_signals
from warmcli.interrupted import held_interrupts


def handler(signum, frame):
    raise KeyboardInterrupt


signal.signal(signal.SIGTERM, handler)
child_signals.watch(handler)
forked = []


def fork():
    pid = os.fork()
    if pid == 0:
        time.sleep(3)
        os._exit(0)
    forked.append(pid)


with held_interrupts():
    thread = threading.Thread(target=fork)
    thread.start()
    thread.join()
os.kill(forked[0], signal.SIGTERM)
_, status = os.waitpid(forked[0], 0)
print("killed" if os.WIFSIGNALED(status) else "lived on")
"""


def test_a_child_forked_during_a_hold_dies_of_sigterm(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORKED_IN_A_HOLD],
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=30,
    )
    # was "lived on": the hold's handler, only noting the signal, was the child's for ever
    assert done.stdout == "killed\n", done.stdout + done.stderr
