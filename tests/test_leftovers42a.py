"""Leftovers of stop 41 (leftovers42a): a write-back's one write of what it built, errors
of one line, a deeply nested tune key, and a process started during a long commit."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from subprocess import PIPE
from typing import Any

import pytest
from conftest import Warm

from bench import generated
from warmcli import Bundle, Kernel, ProcessMode, ProcessModeOverride, Runtime, Tunable
from warmcli.backends.host import HostDevice
from warmcli.errors import TuneSpecError
from warmcli.warming.workload import load_workload

ROOT = Path(__file__).resolve().parent.parent


def _written(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_a_write_back_writes_what_it_built_once_at_the_time_of_what_it_served(
    forked: Callable[[Warm], Any], warm: Warm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "b.warm"
    proc = forked(warm)("run", "-q", "--bundle", path, generated.write(tmp_path / "two.py", 2))
    assert proc.returncode == 0, proc.stderr
    monkeypatch.setenv("WARM_HOME", warm.env["WARM_HOME"])
    with Bundle.open(path, write=True) as bundle:
        rt = Runtime(HostDevice(), bundle)  # serves two, builds two
        with ProcessModeOverride(ProcessMode.EXECUTE):
            load_workload(generated.write(tmp_path / "four.py", 4)).function(rt)
        statements: list[str] = []
        bundle._conn.set_trace_callback(statements.append)  # SQLite's own record of its work
        assert rt.persist(bundle) == (2, 0)
        bundle._conn.set_trace_callback(None)
        rt.close()
    touched = [s for s in statements if s.startswith("UPDATE kernels SET last_used")]
    assert len(touched) == 2, touched  # the served ones only: the built are stored once
    with sqlite3.connect(path) as conn:
        times = conn.execute("SELECT count(DISTINCT last_used), count(*) FROM kernels")
        assert times.fetchone() == (1, 4)


RAISES = """
DEVICE = "host"
def workload(rt):
    raise ValueError("first\\nsecond\\x1b[2J")
"""
DEEP = """
from warmcli import Kernel, Tunable
DEVICE = "host"
SRC = "void touch(int *p, int n) { if (n < 0) p[0] = V; }"
def launch(rt, k, b, n, *, stream=None):
    rt.launch(k, b, n, stream=stream)
KEY = 1
for _ in range(20_000):  # deeper than JSON's C encoder goes: 3.13's limit is 10,000
    KEY = [KEY]
T = Tunable("deep", {f"v{i}": Kernel(SRC, "touch", "Pi", defines={"V": i}) for i in (1, 2)},
            launch, key=lambda b, n: KEY)
def workload(rt):
    rt.tune(T, rt.buffer(4, "int32"), 1)
"""


@pytest.mark.parametrize(
    ("source", "said"),
    [
        (RAISES, "ValueError: first\\x0asecond\\x1b[2J"),
        (DEEP, "TuneSpecError: tunable deep: key= gave a value nested too deeply"),
    ],
)
def test_warm_run_says_a_workloads_error_on_one_line(
    forked: Callable[[Warm], Any], warm: Warm, tmp_path: Path, source: str, said: str
) -> None:
    workload = tmp_path / "w.py"
    workload.write_text(source)
    proc = forked(warm)("run", "--bundle", tmp_path / "b.warm", workload)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "\x1b" not in proc.stderr, proc.stderr
    assert said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_deeply_nested_key_is_a_tune_spec_error_naming_the_tunable() -> None:
    key: Any = 1
    for _ in range(20_000):  # (as DEEP's: 5,000 was keyed on 3.13)
        key = (key,)
    source = "void touch(int *p, int n) { if (n < 0) p[0] = V; }"
    kernels = {f"v{i}": Kernel(source, "touch", "Pi", defines={"V": i}) for i in (1, 2)}
    tunable = Tunable("deep", kernels, lambda rt, k, b, n: None, key=lambda b, n: key)
    rt = Runtime(HostDevice())
    try:
        with pytest.raises(TuneSpecError, match=r"^tunable deep: key= gave a value nested"):
            rt.tune(tunable, rt.buffer(4, "int32"), 1)
        keyed_by_inputs = Tunable("deep", kernels, lambda rt, k, b, n: None)
        with pytest.raises(TypeError, match=r"^tunable deep: input 2 is nested too deeply"):
            rt.tune(keyed_by_inputs, rt.buffer(4, "int32"), key)
    finally:
        rt.close()


# A production process started while a writer holds the bundle's lock (the waits shortened,
# as tests/test_fleet41.py shortens them): it runs cold, then serves once the lock is free.
LATE_OPEN = """
import sys, time
import warmcli.bundle.file as bundle_file
bundle_file.LOCK_WAIT_SECONDS = 0.3
try:
    import warmcli.bundle.reopening as reopening
    reopening.REOPEN_SECONDS = 0.1
except ImportError:  # (before leftovers42a: no retry at all)
    pass
from warmcli import Kernel
import warmcli
SRC = "void fill(double *o, int n) { for (int i = 0; i < n; i++) o[i] = i / (DIV) + 0.5; }"
rt = warmcli.runtime("host")
def launch(d):
    o = rt.buffer(5, "float64")
    rt.launch(Kernel(SRC, "fill", "Pi", defines={"DIV": d}), o, 5)
    return rt.read(o).tolist()
print(launch(3), len(warmcli.report().kernels), flush=True)
input()  # the lock is free now
time.sleep(0.2)  # (past REOPEN_SECONDS: its next read tries the bundle again)
served = launch(5), launch(6)
print(served, str(warmcli.report()).split(" ")[:3], len(warmcli.report().kernels), flush=True)
"""
FILLS = """
from warmcli import Kernel
DEVICE = "host"
SRC = "void fill(double *o, int n) { for (int i = 0; i < n; i++) o[i] = i / (DIV) + 0.5; }"
def workload(rt):
    for d in (3, 5, 6):
        rt.launch(Kernel(SRC, "fill", "Pi", defines={"DIV": d}), rt.buffer(5, "float64"), 5)
"""
HOLD = """
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
input()
c.execute("ROLLBACK")
"""


def test_a_process_started_during_a_long_commit_serves_once_the_lock_is_free(
    forked: Callable[[Warm], Any], warm: Warm, tmp_path: Path
) -> None:
    path = tmp_path / "b.warm"
    proc = forked(warm)("run", "-q", "--bundle", path, _written(tmp_path / "fills.py", FILLS))
    assert proc.returncode == 0, proc.stderr
    env = dict(warm.env, WARM_BUNDLE=str(path), PYTHONPATH=str(ROOT))
    run = [sys.executable, "-c"]
    holder = subprocess.Popen([*run, HOLD, str(path)], stdin=PIPE, stdout=PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        server = subprocess.Popen(
            [*run, LATE_OPEN], env=env, stdin=PIPE, stdout=PIPE, stderr=PIPE, text=True
        )
        assert server.stdout is not None and server.stdin is not None
        first = server.stdout.readline().split("] ")
        assert first[1].strip() == "1", first  # cold: compiled the one it launched
        holder.communicate("\n", timeout=10)  # its commit ends
        out, err = server.communicate("\n", timeout=30)
    finally:
        holder.kill()
    assert server.returncode == 0, err
    assert out.strip().endswith("] 1"), out  # served the others: compiled nothing more
    assert "['warm:', 'bundle', " in out, out  # its report names the bundle it serves now
    said = [line for line in err.splitlines() if line.strip()]
    assert len(said) == 1 and "runs cold" in said[0] and "locked" in said[0], err


# As test_leftovers41b's LATE_THREAD, but the thread holds `rt.launch` taken before its pass
# ended (a bound method, as `functools.partial(rt.launch, k)` holds), and launches once the
# next pass began: pass 2's thread, in the verify pass, on pass 2's retired runtime.
LATE_BOUND = """
import threading
from warmcli import Kernel
CALLS, NEXT, LATE = [0], {}, {}
def workload(rt):
    CALLS[0] += 1
    p = CALLS[0]
    if p - 1 in NEXT:
        NEXT[p - 1].set()  # the last pass's thread goes now
    k = Kernel("void late(int *x) { x[0] = PASS; }", "late", "P", defines={"PASS": p})
    go, NEXT[p] = rt.launch, threading.Event()
    def bg():
        NEXT[p].wait()
        go(k, rt.buffer(1, "int32"))
        print("LAUNCHED LATE", p, flush=True)
    LATE[p] = threading.Thread(target=bg, name="late", daemon=True)
    LATE[p].start()
    if p - 1 in LATE:  # what the last pass's thread does lands in this pass: waited for
        LATE[p - 1].join(timeout=60)  # (stopped or done, it ends)
"""


def test_a_late_thread_holding_a_bound_launch_is_stopped_too(
    forked: Callable[[Warm], Any], warm: Warm, tmp_path: Path
) -> None:
    bundle = tmp_path / "late.warm"
    run = forked(warm)("run", _written(tmp_path / "w.py", LATE_BOUND), "-b", bundle, "-d", "host")
    said = run.stdout + run.stderr
    assert run.returncode == 0 and "corrupt" not in said, said
    assert "note: thread late launched kernel late[PASS=2] after its pass ended" in said, said
    assert "LAUNCHED LATE 2" not in said, said
    assert forked(warm)("verify", bundle).returncode == 0
