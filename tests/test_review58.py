"""Review of stop 58's fork and signal handling: a stop sent to a child of a user's fork.

`warmcli.forking` holds SIGINT, SIGTERM and SIGHUP (a handler that only notes them) across
every main-thread fork; the child inherits that handler until warm's after-fork hook sets the
user's back. A stop the child got meanwhile (sent to it as it was made) was noted in the
child's copy and dropped: the child ran on. These run a fresh Python: the child's own stop is
sent by an after-fork hook that runs before warm's (registered before `warmcli.forking` is imported,
as a runtime made imports it)."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

CHILD = """
import os, signal, sys, time
signum = getattr(signal, sys.argv[1])
os.register_at_fork(after_in_child=lambda: os.kill(os.getpid(), signum))
import warmcli.forking  # noqa: F401  (as a runtime made imports it; its hook after the above)
if signum != signal.SIGINT:
    signal.signal(signum, lambda s, f: sys.exit(3))
pid = os.fork()
if pid == 0:
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            time.sleep(0.01)
        os._exit(9)  # ran on: its stop lost
    except KeyboardInterrupt:
        os._exit(2)
    except SystemExit as stop:
        os._exit(stop.code)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


def _child_code(signal_name: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, signal_name],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout.strip()


def test_a_ctrl_c_a_forked_child_gets_as_it_is_made_is_raised_there() -> None:
    assert _child_code("SIGINT") == "2"


def test_a_handled_sigterm_a_forked_child_gets_as_it_is_made_runs_its_handler() -> None:
    assert _child_code("SIGTERM") == "3"
