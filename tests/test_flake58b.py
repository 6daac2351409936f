"""A Ctrl-C that lands as warm starts a child (a compiler, a probe, `warm run`'s worker) ends that
child too.

`warmcli.backends.processes.run` kills and reaps a child's group on an exception once it is
tracked; a Ctrl-C (or a stop signal's handler's KeyboardInterrupt) that landed between the fork
and that tracking (in `subprocess.Popen`, which waits for the child's `exec`, or just after it)
left the compiler running in a session of its own, untracked (`stop_compilers` never saw it)
and unreaped. The signal is sent by the child itself, from an at-fork hook (after the fork,
before its `exec`, once the parent sleeps waiting for that `exec` in `Popen`), so it lands there
every time; the hook writes the child's pid first.

`warmcli.warming.isolation.run_isolated` forwarded a stop to its worker only once `_wait` had set
its handler: a Ctrl-C (or SIGTERM) that landed as the worker was forked raised in the supervisor
(`pid = os.fork()`), the worker left running the workload unstopped, unreaped. A fresh Python
runs it there, the fork's last hook `_thread.interrupt_main` (C: the Ctrl-C is pending as the fork
returns).

A process that imported warm (a notebook's, a server's, Python's own SIGINT handler) and forked
(`os.fork`, a `fork` pool) while a Ctrl-C came had Python run its handler in the first Python
after the fork, warm's `_after_in_parent` hook, where what it raises is only printed ("Exception
ignored in ... _after_in_parent"): the Ctrl-C was lost. Without warm it is raised as the fork
returns; now warm's fork holds it (`warmcli.forking._hold_stops`) and sends it again after.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from warmcli.backends import processes

ROOT = Path(__file__).resolve().parent.parent

_ARMED: list[str] = []  # the file the next fork's child writes its pid into, then signals


def _signal_parent_from_child() -> None:
    """In the child: its pid written, then SIGINT sent to the parent once the parent sleeps
    (in `Popen`, waiting for this child's `exec`: past the fork's hooks, which it runs)."""
    if _ARMED:
        Path(_ARMED.pop()).write_text(str(os.getpid()))
        parent = os.getppid()
        for _ in range(100_000):  # (a bound: signalled all the same)
            stat = Path(f"/proc/{parent}/stat").read_text()
            if stat[stat.rindex(")") + 2] == "S":
                break
        os.kill(parent, signal.SIGINT)


os.register_at_fork(after_in_child=_signal_parent_from_child)


@contextlib.contextmanager
def _armed(pid_file: Path) -> Iterator[None]:
    _ARMED[:] = [str(pid_file)]
    try:
        yield
    finally:
        _ARMED.clear()


def _alive(pid: int) -> bool:
    """Whether `pid` is a process not yet reaped (killed and reaped by this test where so)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    os.kill(pid, signal.SIGKILL)  # (maybe not yet in a group of its own)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)
    return True


def test_a_ctrl_c_as_a_child_starts_ends_and_reaps_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with _armed(pid_file), pytest.raises(KeyboardInterrupt):
        processes.run(["sleep", "30"], timeout=60)
    pid = int(pid_file.read_text())
    assert not _alive(pid)  # (before: running, untracked, unreaped)
    assert not processes._Live.groups


def test_a_child_started_without_a_stop_runs_as_before(tmp_path: Path) -> None:
    done = processes.run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=60)
    assert (done.returncode, done.out, done.err, done.timed_out) == (3, "out\n", "err\n", False)
    assert not processes._Live.groups


SUPERVISOR = """
import _thread, os, time
from warmcli.warming.isolation import run_isolated

def work():
    time.sleep(60)
    return 0

os.register_at_fork(after_in_parent=_thread.interrupt_main)  # (the last hook: C)
try:
    outcome = run_isolated(work)
except KeyboardInterrupt:
    outcome = "escaped"
left = open(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read().split()
for pid in map(int, left):  # (a worker that let go is reaped as this ends: waited for here)
    os.kill(pid, 9) if outcome == "escaped" else os.waitpid(pid, 0)
print(repr(outcome), len(left))
"""


def test_a_ctrl_c_as_the_worker_is_forked_is_forwarded_to_it() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SUPERVISOR], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    # (before: "'escaped' 1": the worker left running the workload, killed by the script)
    assert done.stdout.startswith("WorkerCrash(signal=<Signals.SIGINT: 2>"), done.stdout
    assert "interrupted=True" in done.stdout


FORKED = """
import _thread, os, time
os.register_at_fork(after_in_parent=_thread.interrupt_main)  # (before warm's hooks: run first)
import warmcli.forking  # warm's hooks, as a process using warm has them
try:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    time.sleep(60)
    print("lost")
except KeyboardInterrupt:
    print("raised")
"""


def test_a_ctrl_c_as_a_process_using_warm_forks_is_raised() -> None:
    done = subprocess.run(
        [sys.executable, "-c", FORKED], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    # (before: 'lost' after 60 s, "Exception ignored in: <function _after_in_parent" on stderr)
    assert (done.stdout, done.stderr) == ("raised\n", "")
