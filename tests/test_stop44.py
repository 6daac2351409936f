"""A stop that lands while `warm run`'s worker judges how its work ended (`isolation._worker`):
a workload whose own SIGINT handler exits (`sys.exit()`), stopped, then stopped again while
warm answered that stop and again while the worker judged the second one's `SystemExit`,
ended the run 0 with nothing said (its code set to the exit's 0 before the judging found a
stop); stopped again as the worker's except clause for that `SystemExit` began, it ended 1,
unsaid (its code still the 1 it began with).
The sprayed Ctrl-C (test_review44a) hit these about 1 run in 30 under load; here the
workload forces each window, sending itself SIGINT from a profile or trace hook at the exact
point. Real `warm run` processes, the real C compiler."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from fresh_python import fresh_warm

HEAD = """
import os, signal, sys
from warmcli import Kernel
DEVICE = "host"
def stop(signum, frame):
    sys.exit(CODE)
signal.signal(signal.SIGINT, stop)
def judged_by(caller):  # a stop again as warm's `caller` judges one
    def hook(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "stopped_by_signal":
            if frame.f_back.f_code.co_name == caller:
                os.kill(os.getpid(), signal.SIGINT)
    return hook
def at_workers_answer():  # a stop again as the worker's except clause begins
    worker = sys._getframe()
    while worker.f_code.co_name != "_worker":
        worker = worker.f_back
    raised = []
    def local(frame, event, arg):
        if event == "exception":
            raised.append(arg)
        elif raised and event == "line":
            sys.settrace(None)
            os.kill(os.getpid(), signal.SIGINT)
        return local
    worker.f_trace = local
    sys.settrace(lambda *a: None)  # (tracing on: no other frame traced)
"""

WHILE_JUDGED = (
    HEAD
    + """
def workload(rt):
    rt.launch(Kernel("void f(double *o, int n) { }", "f", "Pi"), rt.buffer(4, "float64"), 4)
    sys.setprofile(judged_by("run"))  # warm's answer to the first stop, cut short
    sys.settrace(judged_by("_worker"))  # and the worker's judging of that second one
    os.kill(os.getpid(), signal.SIGINT)
"""
)

AS_ANSWERED = (
    HEAD
    + """
def workload(rt):
    rt.launch(Kernel("void f(double *o, int n) { }", "f", "Pi"), rt.buffer(4, "float64"), 4)
    sys.setprofile(judged_by("run"))  # warm's answer to the first stop, cut short
    at_workers_answer()  # and the worker's to that second one, as it begins
    os.kill(os.getpid(), signal.SIGINT)
"""
)


def _run(tmp_path: Path, source: str, code: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "w.py").write_text(source.replace("CODE", code))
    return fresh_warm(tmp_path, "run", "w.py", "-b", "b.warm", "-q", timeout=60)


@pytest.mark.parametrize("code", ["", "1"])
def test_a_stop_while_the_worker_judges_a_stop_handlers_exit_still_stops(
    tmp_path: Path, code: str
) -> None:
    done = _run(tmp_path, WHILE_JUDGED, code)
    assert done.returncode == 130, done.stdout + done.stderr  # was 0 (sys.exit(1): 1), unsaid
    assert done.stderr.splitlines()[-1].startswith("warm: interrupted"), done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_a_stop_as_the_worker_answers_an_interrupt_still_stops(tmp_path: Path) -> None:
    done = _run(tmp_path, AS_ANSWERED, "")
    assert done.returncode == 130, done.stdout + done.stderr  # was 1, nothing said
    assert done.stderr.splitlines()[-1].startswith("warm: interrupted"), done.stderr
    assert "Traceback" not in done.stdout + done.stderr
