"""A Ctrl-C that lands as warm starts a child (a compiler, a probe) ends that child too.

`warmcli.backends.processes.run` kills and reaps a child's group on an exception once it is
tracked; a Ctrl-C (or a stop signal's handler's KeyboardInterrupt) that landed between the fork
and that tracking (in `subprocess.Popen`, which waits for the child's `exec`, or just after it)
left the compiler running in a session of its own, untracked (`stop_compilers` never saw it)
and unreaped. The signal is sent by the child itself, from an at-fork hook (after the fork,
before its `exec`, once the parent sleeps waiting for that `exec` in `Popen`), so it lands there
every time; the hook writes the child's pid first.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from warmcli.backends import processes

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
