"""Wrongs a new user's trial left at stop 41, each now right: a daemon thread that launches
after its pass ended is stopped and said so, never a corrupt bundle. The real CLI in a
subprocess, real SQLite files, the real C compiler.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm

# Each pass's daemon thread launches a kernel of its own (its pass's number in a define) once
# that pass's workload() has returned: it lands in the next pass, on the last pass's runtime.
LATE_THREAD = """
import threading, time
from warmcli import Kernel
CALLS = [0]
def workload(rt):
    CALLS[0] += 1
    k = Kernel("void late(int *x) { x[0] = PASS; }", "late", "P", defines={"PASS": CALLS[0]})
    first = Kernel("void early(int *x) { x[0] = 1; }", "early", "P")
    returned = threading.Event()
    def bg():
        s = rt.stream()
        rt.launch(first, rt.buffer(1, "int32"), stream=s)
        returned.wait()
        time.sleep(0.2)
        rt.launch(k, rt.buffer(1, "int32"), stream=s)
        print("LAUNCHED LATE", flush=True)
    threading.Thread(target=bg, name="late", daemon=True).start()
    time.sleep(0.6)
    returned.set()
"""


def test_a_daemon_thread_launching_after_its_pass_is_stopped_not_a_corrupt_bundle(
    warm: Warm, workload_file: Path, tmp_path: Path
) -> None:
    path = workload_file(LATE_THREAD)
    bundle = tmp_path / "late.warm"
    run = warm("run", path, "-b", bundle, "-d", "host")
    said = run.stdout + run.stderr
    assert "corrupt" not in said and "closed" not in said, said
    assert run.returncode == 0, said
    assert "note: thread late launched kernel late[PASS=2] after its pass ended" in said, said
    # stopped there, as Python stops a daemon thread as its process ends: its launch never ran
    assert "LAUNCHED LATE" not in said.split("Pass 3")[1], said
    assert warm("verify", bundle).returncode == 0


RAISES_ON = """
from warmcli import Kernel
CALLS = [0]
def workload(rt):
    CALLS[0] += 1
    rt.launch(Kernel("void a(int *x) { x[0] = 1; }", "a", "P"), rt.buffer(1, "int32"))
    if CALLS[0] == {call}:
        raise ValueError("bad batch")
"""


def test_a_workload_that_raises_after_a_store_says_what_is_kept(
    warm: Warm, workload_file: Path, tmp_path: Path
) -> None:
    for call, during in ((2, "CompileAndAutotune"), (3, "Verify (Execute)")):
        path = workload_file(RAISES_ON.replace("{call}", str(call)), f"w{call}.py")
        bundle = tmp_path / f"r{call}.warm"
        run = warm("run", path, "-b", bundle, "-q")
        assert run.returncode == 2, run.stdout + run.stderr
        assert run.stderr == (
            f"warm: error: workload raised during {during}: {path}:8: ValueError: bad batch; "
            f"1 kernel(s) and 0 tune(s) stored in {bundle} before it are kept\n"
        )
        assert warm("verify", bundle).returncode == 0
    # raising before anything was stored says nothing of it (and leaves no new bundle)
    path = workload_file(RAISES_ON.replace("{call}", "1"), "w1.py")
    run = warm("run", path, "-b", tmp_path / "r1.warm", "-q")
    assert run.returncode == 2 and run.stderr.endswith("ValueError: bad batch\n"), run.stderr
    assert not (tmp_path / "r1.warm").exists()
