"""Review of stop 43's process and signal code (child_signals, stop_signals, forked_launches,
pool_tasks, the exit path's `_EndsAs`): a stop signal's handler whose `SystemExit` code is no
int but equals 0 (`sys.exit(0.0)`, numpy's `int64(0)`) cut a write-back short and ended the
process 0, its text printed, where Python ends one so with 1; one whose code's `==` raised
printed a traceback from warm's exit handler and ended 0. Real processes in subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from fresh_python import fresh_env as _env
from fresh_python import fresh_warm as _warm
from held_lock import HOLD


def _python(tmp: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env=_env(tmp),
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=60,
    )


# A code Python ends with 1, printing it: a float, numpy's int, an object whose `==` raises.
ODD = (
    'type("Odd", (), {"__eq__": lambda s, o: 1 / 0, "__hash__": lambda s: 1,'
    ' "__str__": lambda s: "odd"})()'
)


@pytest.mark.parametrize("code", ["0.0", "__import__('numpy').int64(0)", ODD, "3", "None", "0"])
def test_a_stops_code_ends_the_write_back_as_python_ends_it_in_the_main_code(
    tmp_path: Path, code: str
) -> None:
    """warm's exit handler's end (`end_as_stopped`, as `production._at_exit` calls it, its
    text printed first) against the same `SystemExit` raised by the main code."""
    plain = _python(tmp_path, f"import sys\nraise SystemExit({code})")
    ends = (
        "from warmcli.interrupted import end_as_stopped\n"
        f"stop = SystemExit({code})\n"
        "end_as_stopped(stop)\n"  # (a code that is no int: its text written there)
    )
    warm = _python(tmp_path, ends)
    assert (warm.returncode, warm.stderr) == (plain.returncode, plain.stderr)  # 0.0: was 0


SRC = "void fill(double *o, int n) { for (int i = 0; i < n; i++) o[i] = i / 7.0; }"
WORKLOAD = f"""
from warmcli import Kernel
DEVICE = "host"
def workload(rt):
    rt.launch(Kernel("{SRC}", "fill", "Pi"), rt.buffer(8, "float64"), 8)
"""


# A service whose thread reads the bundle (a kernel's first launch) while another process holds
# the bundle's lock, as its main thread forks: the fork waits for that read (`warmcli.forking`),
# and the stop signal sent meanwhile lands in that wait. `HANDLER`: the service's own SIGTERM
# handler (`sys.exit(3)`, counted), else Ctrl-C's `KeyboardInterrupt`.
FORKS = """
import os, signal, sys, threading, time
import warmcli
from warmcli import Kernel
calls = []
if os.environ.get("HANDLER"):
    def stop(signum, frame):
        calls.append(signum)
        sys.exit(3)
    signal.signal(signal.SIGTERM, stop)
rt = warmcli.runtime("host")
SRC = os.environ["SRC"].replace("7.0", "DIV")  # a kernel the bundle lacks: its first launch reads
print("ready", flush=True)
sys.stdin.readline()  # the bundle's lock is held now
def read():
    rt.launch(Kernel(SRC, "fill", "Pi", defines={"DIV": "9.0"}), rt.buffer(8, "float64"), 8)
threading.Thread(target=read, daemon=True).start()
time.sleep(0.3)
try:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    time.sleep(5)
    print("went on", flush=True)
finally:
    print("handler called", len(calls), flush=True)
"""


@pytest.mark.parametrize("handler", ["", "sys.exit(3)"])
def test_a_stop_sent_as_a_fork_waits_for_a_bundle_read_is_not_lost(
    tmp_path: Path, handler: str
) -> None:
    bundle = tmp_path / "b.warm"
    (tmp_path / "w.py").write_text(WORKLOAD)
    made = _warm(tmp_path, "run", "w.py", "-b", str(bundle), "-q")
    assert made.returncode == 0, made.stderr
    env = dict(_env(tmp_path), WARM_BUNDLE=str(bundle), HANDLER="1" if handler else "", SRC=SRC)
    service = subprocess.Popen(
        [sys.executable, "-c", FORKS],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert service.stdout is not None and service.stdout.readline() == "ready\n"  # bundle open
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(bundle), "2"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        assert service.stdin is not None
        service.stdin.write("\n")
        service.stdin.flush()
        time.sleep(0.8)  # in the fork's wait for the reading thread
        service.send_signal(signal.SIGTERM if handler else signal.SIGINT)
        out, err = service.communicate(timeout=30)
    finally:
        holder.kill()
        holder.wait()
    assert "went on" not in out, err  # was: "Exception ignored in: <function _before ...>"
    assert "Exception ignored" not in err, err
    if handler:
        assert (service.returncode, out) == (3, "handler called 1\n"), err  # called once
    else:
        assert service.returncode == -signal.SIGINT, err  # as Python ends it
        assert err.endswith("KeyboardInterrupt\n") and out == "handler called 0\n", err


# A workload with a SIGINT handler of its own that exits (`sys.exit()`), stopped by Ctrl-C at a
# terminal: SIGINT to the whole group, so its worker gets it twice (from the terminal, and from
# the supervisor that forwards it), the second as warm answers the first.
OWN_HANDLER = """
import os, signal, sys, time
from warmcli import Kernel
DEVICE = "host"
def stop(signum, frame):
    sys.exit()
signal.signal(signal.SIGINT, stop)
def workload(rt):
    rt.launch(Kernel("void f(double *o, int n) { }", "f", "Pi"), rt.buffer(4, "float64"), 4)
    print("worker", os.getpid(), flush=True)
    time.sleep(30)
"""


def test_a_workloads_exiting_stop_handler_called_twice_still_stops_the_run(tmp_path: Path) -> None:
    (tmp_path / "w.py").write_text(OWN_HANDLER)
    run = subprocess.Popen(
        [sys.executable, "-m", "warmcli", "run", "w.py", "-b", "b.warm", "-q"],
        env=_env(tmp_path),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    assert run.stdout is not None
    worker = int(run.stdout.readline().split()[1])
    os.killpg(run.pid, signal.SIGINT)  # Ctrl-C
    for _ in range(30):  # and again, as warm answers it (the supervisor's forwarded one)
        time.sleep(0.002)
        try:
            os.kill(worker, signal.SIGINT)
        except ProcessLookupError:
            break
    out = run.communicate(timeout=60)[0]
    assert run.returncode == 130, out  # was 0, nothing said: a stopped run said to succeed
    assert out.splitlines()[-1].startswith("warm: interrupted"), out


# A workload's forked child that ends by what it raises out of the entry, as Python ends a
# process so: `END`, its last statement.
CHILD_ENDS = """
import os, sys
DEVICE = "host"
def workload(rt):
    pid = os.fork()
    if pid == 0:
        exec(os.environ["END"])
    print("child", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)
if __name__ == "__main__":
    workload(None)
"""


@pytest.mark.parametrize(
    "end", ["sys.exit(2**70)", "sys.exit(2**40 + 7)", "sys.exit('bye')", "raise KeyboardInterrupt"]
)
def test_a_forked_child_ends_as_python_ends_it(
    forked: Any, warm: Warm, tmp_path: Path, end: str
) -> None:
    (tmp_path / "w.py").write_text(CHILD_ENDS)
    env = dict(_env(tmp_path), END=end)
    plain = subprocess.run(
        [sys.executable, "w.py"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    warm.env["END"] = end
    done = forked(warm)("run", tmp_path / "w.py", "-b", tmp_path / "b.warm", "-q", "--no-verify")
    assert done.returncode == 0, done.stderr  # 2**70: the child ran on into warm's passes
    expected = plain.stdout.splitlines()[0]  # child 255, child 7, child 1, child -2
    assert done.stdout.splitlines()[:2] == [expected] * 2, done.stdout + done.stderr
    if end == "sys.exit('bye')":
        assert done.stderr.splitlines()[:2] == ["bye", "bye"], done.stderr  # was unsaid
    else:
        assert "Traceback" not in done.stderr, done.stderr  # was OverflowError's
