"""Review of wl31's fork handling (`warmcli.forking`): what a fork waits for, in real
processes forked by `os.fork` and `multiprocessing`, each run under a timeout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

GATE = """
import threading
started, forked = threading.Event(), threading.Event()
def square(x):
    return x * x
"""
# A module whose import lasts until the main thread has forked (a warm-up, a plugin's server).
PLUGIN = """
import gate
gate.started.set()
gate.forked.wait(120)
"""
# HOLD_SECONDS made long: a fork that waits for the user's import shows as a hang.
FORKS_WHILE_A_THREAD_IMPORTS = """
import os, sys, threading, warmcli, warmcli.forking
warmcli.use_bundle(None)
warmcli.forking.HOLD_SECONDS = 600
import gate
threading.Thread(target=lambda: __import__("plugin")).start()
gate.started.wait(60)
for _ in range(3):  # a pool of short workers
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
gate.forked.set()
"""
# The main thread inside a user's import that runs a pool: its handler thread forks each
# new worker (one task each) while the main thread's import waits for the results.
POOL_AT_IMPORT = """
import multiprocessing as mp, gate
with mp.get_context("fork").Pool(2, maxtasksperchild=1) as pool:
    print(sum(pool.map(gate.square, range(6), chunksize=1)))
"""
POOL_MAIN = """
import warmcli, warmcli.forking
warmcli.use_bundle(None)
warmcli.forking.HOLD_SECONDS = 600
import pooled
"""


def _run(tmp_path: Path, code: str, **modules: str) -> subprocess.CompletedProcess[str]:
    for name, text in dict(modules, gate=GATE).items():
        (tmp_path / f"{name}.py").write_text(text)
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}:{ROOT}", WARM_HOME=str(tmp_path / "home"))
    env = {k: v for k, v in env.items() if not k.startswith("WARM_") or k == "WARM_HOME"}
    script = tmp_path / "main.py"
    script.write_text(code)
    try:
        return subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("the process hung: a fork, or its child, waited for ever")


def test_a_fork_never_waits_for_a_users_import_in_another_thread(tmp_path: Path) -> None:
    """A process using warm whose other thread was in a long import of its own module (a
    plugin, a model loaded at import) waited 5 s in every `os.fork` (a pool of short
    workers: 5 s a worker): warm waited for every module's import, not warm's only."""
    done = _run(tmp_path, FORKS_WHILE_A_THREAD_IMPORTS, plugin=PLUGIN)
    assert done.returncode == 0 and done.stdout == "7\n7\n7\n", done.stderr


def test_a_pool_run_from_an_import_forks_its_workers_at_once(tmp_path: Path) -> None:
    """A `multiprocessing` pool with `maxtasksperchild` run by a module's import: each worker
    its handler thread forked waited 5 s for the main thread's import to end (which waited
    for those very workers)."""
    done = _run(tmp_path, POOL_MAIN, pooled=POOL_AT_IMPORT)
    assert done.returncode == 0 and done.stdout == "55\n", done.stderr


# A fork while another thread makes a new bundle (`use_bundle(path, write=True)` where none
# is yet): the child starts after SQLite wrote the empty bundle, as after any open.
FORK_WHILE_CREATING = """
import os, sqlite3, sys, threading, time, warmcli
made, wrote = threading.Event(), []
def gate(frame, event, arg):  # SQLite's connect of the new bundle, about to take its mutexes
    if frame.f_code.co_name != "_write_empty" or arg is not sqlite3.connect:
        return
    if event == "c_call":
        made.set()
        time.sleep(0.5)
    elif event == "c_return":
        wrote.append(True)
def other():
    sys.setprofile(gate)
    warmcli.use_bundle(sys.argv[1], write=True)
threading.Thread(target=other).start()
made.wait(30)
pid = os.fork()
if pid == 0:
    os._exit(0 if wrote else 1)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_fork_while_another_thread_makes_a_bundle_waits_for_it(tmp_path: Path) -> None:
    """A child forked while another thread made a new bundle (SQLite's connect and writes of
    the empty bundle, outside the lock a fork waits for) could stop for ever in its own
    first SQLite call, as one forked during an open did."""
    code = FORK_WHILE_CREATING.replace("sys.argv[1]", repr(str(tmp_path / "n.warm")))
    done = _run(tmp_path, code)
    assert done.returncode == 0 and done.stdout == "0\n", done.stderr


# A fork while another thread reads the device's fingerprint for the first time (a cached
# value, read at a first tune): the child tunes on that very runtime.
FORK_WHILE_FINGERPRINTING = """
import os, sys, threading, time
import numpy as np
import warmcli
from warmcli import Kernel, Tunable
SRC = "void scale(const float *x, float *y, int n) { for (int i = 0; i < n; i++) y[i] = x[i]*SC; }"
def launch(rt, k, x, y, n, *, stream=None):
    rt.launch(k, x, y, n, stream=stream)
T = Tunable(
    name="t", launch=launch,
    candidates={f"c{i}": Kernel(SRC, "scale", "PPi", defines={"SC": f"{i}.0f"}) for i in (2, 3)},
)
warmcli.use_bundle(None)
def tune():
    rt = warmcli.runtime()
    x, y = rt.upload(np.arange(8, dtype=np.float32)), rt.buffer(8, "float32")
    return rt.tune(T, x, y, 8)
reading = threading.Event()
def gate(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "fingerprint" and not reading.is_set():
        reading.set()
        time.sleep(0.5)
    return None
threading.settrace(gate)
threading.Thread(target=tune).start()
reading.wait(60)
pid = os.fork()
if pid == 0:
    os._exit(0 if tune() in ("c2", "c3") else 3)
print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_fork_while_another_thread_reads_the_fingerprint_leaves_a_child_that_tunes(
    tmp_path: Path,
) -> None:
    """A child forked while another thread read its device's fingerprint for the first time
    (`functools.cached_property`, which on Python 3.10 and 3.11 holds one lock per property,
    for every instance, while it computes) stopped for ever at its first tune."""
    done = _run(tmp_path, FORK_WHILE_FINGERPRINTING)
    assert done.returncode == 0 and done.stdout == "0\n", done.stderr
