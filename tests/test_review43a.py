"""Stop 43's review of perf43 (the hit table's entries are weak references sharing one
callback) and of trial43a's README section on shipping a bundle in a library.

A launch's hit path found a kernel's function by the object's id alone, trusting that the
entry's callback removed it before the id could be reused: a callback interrupted (a Ctrl-C,
any signal handler that raises, as it starts) left a gone kernel's entry, and a new kernel
given its id ran the old one's function. A warming pass kept every kernel object it checked
the arguments of (by id, strongly), so a workload making its kernels per call grew by one
kernel a launch, and the second pass's hit table with it."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_merge_files import _runs_as_nobody

# A gone kernel's entry left behind as a signal handler's exception would leave it (raised
# as its callback starts); new kernels are made until one has a gone one's id.
STALE_ENTRY = r"""
import gc, json, sys
import warmcli
from warmcli import Kernel
import importlib
hits_module = importlib.import_module("warmcli.runtime.hits")
rt = warmcli.runtime("host")
SRC = "void put(int *p) {{ p[0] = {v}; }}"
buf = rt.upload([0], "int32")
old = [Kernel(SRC.format(v=1), "put", "P") for _ in range(50)]
for k in old:
    rt.launch(k, buf)
del k
ids = {id(k) for k in old}
def interrupt(frame, event, arg):
    if event == "call" and frame.f_code is hits_module._gone.__code__:
        raise KeyboardInterrupt
while old:  # each entry's callback interrupted as it starts
    sys.settrace(interrupt)
    try:
        old.pop()
    except KeyboardInterrupt:
        pass
    sys.settrace(None)
keep, wrote = [], []
for _ in range(100000):
    k = Kernel(SRC.format(v=2), "put", "P")
    keep.append(k)
    if id(k) in ids:
        rt.launch(k, buf)
        wrote.append(int(rt.read(buf)[0]))
        if len(wrote) == 5:
            break
print(json.dumps(wrote))
"""


def test_a_new_kernel_never_runs_a_gone_kernels_function_left_by_an_interrupted_callback(
    warm: Warm,
) -> None:
    """Kernels freed while a signal handler raises in their entries' callback (Ctrl-C in a
    notebook, as a cell drops its kernels): a new kernel at a gone one's id runs its own
    source (wrote 1, the old kernel's, before)."""
    wrote = warm.production(STALE_ENTRY)
    assert wrote and set(wrote) == {2}, wrote


CHURN = """
import gc, sys
from warmcli import Kernel
SRC = "void put(int *p) { p[0] = 1; }"
def workload(rt):
    buf = rt.buffer(1, "int32")
    for i in range(3000):
        rt.launch(Kernel(SRC, "put", "P"), buf)  # a kernel made per call, then dropped
    gc.collect()
    live = sum(isinstance(o, Kernel) for o in gc.get_objects())
    print(f"live kernels: {live}", file=sys.stderr)
"""


def test_a_warming_pass_keeps_no_kernel_object_its_workload_dropped(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm run` of a workload making a kernel per launch: each pass ends with the kernels
    it dropped gone (before: the queue pass kept 3,000, its argument checks holding each by
    id; the next pass 6,000, its hit table's entries alive with them)."""
    workload = tmp_path / "churn.py"
    workload.write_text(CHURN)
    proc = warm("run", workload)
    assert proc.returncode == 0, proc.stderr
    live = [int(line.split()[-1]) for line in proc.stderr.splitlines() if "live kernels" in line]
    assert len(live) >= 2 and max(live) < 10, live


ADD = "void add(int *p) {{ p[0] += {v}; }}"
ADDS = """
from warmcli import Kernel
DEVICE = "host"
def workload(rt):
    rt.launch(Kernel({src!r}, "add", "P"), rt.buffer(1, "int32"))
"""
# A production process launching a kernel its bundle lacks, WARM_REPORT=1.
LACKS = f"""
import warmcli
from warmcli import Kernel
rt = warmcli.runtime("host")
rt.launch(Kernel({ADD.format(v=2)!r}, "add", "P"), rt.buffer(1, "int32"))
"""


def _unprivileged(command: list[str]) -> list[str]:
    """`command` as a user whom a read-only file's mode stops (root writes through it)."""
    if os.geteuid() != 0:
        return command
    if not _runs_as_nobody():  # (no setpriv, or a libpython in root's own folder: pyenv's)
        pytest.skip("running as root, with no Python runnable as another user")
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]


def test_the_report_of_a_bundle_this_process_cannot_write_says_what_to_do_instead(
    warm: Warm,
) -> None:
    """A library's bundle installed read-only (trial43a): WARM_REPORT said "re-warm it with
    `warm run`", which the user cannot do there; it says so, and who can."""
    shared = Path(tempfile.mkdtemp(prefix="warm-review43a-"))
    try:
        shared.chmod(0o755)
        home, lib = shared / "home", shared / "lib"
        home.mkdir(mode=0o777)
        home.chmod(0o777)
        lib.mkdir()
        workload = shared / "adds.py"
        workload.write_text(ADDS.format(src=ADD.format(v=1)))
        proc = warm("run", "-q", "-b", lib / "lib.warm", workload)
        assert proc.returncode == 0, proc.stderr
        (lib / "lib.warm.lock").unlink()
        (lib / "lib.warm").chmod(0o444)
        lib.chmod(0o555)
        env = dict(warm.env, WARM_HOME=str(home), WARM_BUNDLE=str(lib / "lib.warm"))
        env.update(WARM_REPORT="1", PYTHONPATH=str(ROOT))
        done = subprocess.run(
            _unprivileged([sys.executable, "-c", LACKS]),
            capture_output=True,
            text=True,
            env=env,
            cwd=shared,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        said = done.stderr.splitlines()[0]
        assert "lacked 1 kernel(s) and 0 tune(s)" in said, done.stderr
        assert "re-warm it with `warm run` where it was built" in said, said
        assert "cannot write it" in said, said
    finally:
        for folder in (shared, shared / "lib"):
            if folder.exists():
                folder.chmod(0o755)
        shutil.rmtree(shared, ignore_errors=True)


def test_a_bundle_of_a_newer_format_says_a_newer_warm_wrote_it(warm: Warm, tmp_path: Path) -> None:
    """`bundle format version 4, this warm reads formats 1, 2, 3` said nothing of why nor
    what to do: a newer warm wrote it, and an upgrade reads it. One line, exit 2."""
    workload = tmp_path / "adds.py"
    workload.write_text(ADDS.format(src=ADD.format(v=1)))
    bundle = tmp_path / "b.warm"
    assert warm("run", "-q", "-b", bundle, workload).returncode == 0
    conn = sqlite3.connect(bundle)
    with conn:
        conn.execute("PRAGMA user_version = 4")
    conn.close()
    proc = warm("stats", bundle)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "format version 4, this warm reads formats 1, 2, 3" in line, line
    assert "a newer warm wrote it: upgrade warm to read it" in line, line


# Eight threads each launch kernels made afresh (half of them in a cycle, freed only by the
# collector, which another thread runs in a loop): every launch's result is its own source's.
THREADS = """
import gc, json, threading
import warmcli
from warmcli import Kernel
rt = warmcli.runtime("host")
SRC = "void put(int *p) {{ p[0] = {v}; }}"
sources = [SRC.format(v=v) for v in range(8)]
wrong, done = [], []
def collect():
    while not done:
        gc.collect()
def work(t):
    buf = rt.upload([0], "int32")
    for i in range(2500):
        v = (i * 3 + t) % 8
        k = Kernel(sources[v], "put", "P")
        if i % 2:
            vars(k)["me"] = k
        rt.launch(k, buf)
        got = int(rt.read(buf)[0])
        if got != v:
            wrong.append((v, got))
        del k
collector = threading.Thread(target=collect)
collector.start()
workers = [threading.Thread(target=work, args=(t,)) for t in range(8)]
for w in workers:
    w.start()
for w in workers:
    w.join()
done.append(1)
collector.join()
gc.collect()
live = sum(isinstance(o, Kernel) for o in gc.get_objects())
print(json.dumps({"wrong": wrong[:5], "live": live}))
"""


def test_threads_launching_kernels_made_and_freed_under_a_collecting_loop_compute_their_own(
    warm: Warm,
) -> None:
    """20,000 launches of kernels made and dropped in 8 threads, ids reused throughout, the
    collector freeing the cyclic ones in another: each wrote its own value, none lives on."""
    result = warm.production(THREADS)
    assert result == {"wrong": [], "live": 0}, result


# A Ctrl-C handled as the hit table's callback runs: warm's handler called with the callback's
# frame, as Python calls it for a signal landing there (a trace function's own frame else).
CTRL_C_IN_CALLBACK = """
import importlib, signal, sys
from warmcli import Kernel
hits = importlib.import_module("warmcli.runtime.hits")
def workload(rt):
    buf = rt.buffer(1, "int32")
    k = Kernel("void put(int *p) { p[0] = 1; }", "put", "P")
    rt.launch(k, buf)
    def trace(frame, event, arg):
        if event == "call" and frame.f_code is hits._gone.__code__:
            signal.getsignal(signal.SIGINT)(signal.SIGINT, frame)
    sys.settrace(trace)
    del k
    sys.settrace(None)
    for _ in range(100000):  # (where a Ctrl-C sent again lands)
        pass
"""


def test_a_ctrl_c_landing_in_the_hit_tables_callback_still_stops_warm_run(
    warm: Warm, tmp_path: Path
) -> None:
    """warm run's Ctrl-C handler raised KeyboardInterrupt inside the weak-reference callback
    of a kernel's hit-table entry, where Python only prints it ("Exception ignored in:
    <function _gone>"): the run went on and exited 0. It is sent again, as one landing in
    importlib's callback is, and the run stops as interrupted. (A started `warm run`, never
    a fork: the SIGINT handler its workload calls is what is tried.)"""
    workload = tmp_path / "ctrl_c.py"
    workload.write_text(CTRL_C_IN_CALLBACK)
    proc = Warm(warm.env)("run", "-b", tmp_path / "b.warm", workload)
    assert "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.returncode == 130, proc.stderr


UNREFERENCEABLE = """
import json, weakref
import warmcli
from warmcli import Kernel
rt = warmcli.runtime("host")
kernel = Kernel("void put(int *p) { p[0] += 3; }", "put", "P")
buf = rt.upload([0], "int32")
proxy = weakref.proxy(kernel)  # no weak reference can be made to it
for _ in range(3):
    rt.launch(proxy, buf)
rt.launch(kernel, buf)
print(json.dumps(int(rt.read(buf)[0])))
"""


def test_a_kernel_that_cannot_be_weakly_referenced_launches_all_the_same(warm: Warm) -> None:
    """A kernel passed as a `weakref.proxy` (which no weak reference can point at) raised
    `TypeError: cannot create weak reference to 'weakref.ProxyType' object` at its first
    launch, its kernel compiled, since the hit table held kernels weakly (stop 42); it
    launches, keyed at each launch (it was held strongly before then)."""
    assert warm.production(UNREFERENCEABLE) == 12


# A process serving a copy of a bundle that is removed (importlib.resources.as_file's, once
# its block ends), then forked: the child opens it anew and finds no file.
REMOVED = """
import json, os, shutil, sys
import warmcli
from warmcli import Kernel
copy = sys.argv[1] + ".copy"
shutil.copy(sys.argv[1], copy)
warmcli.use_bundle(copy, write=False)
rt = warmcli.runtime("host")
os.remove(copy)
read, write = os.pipe()
if os.fork() == 0:
    rt.launch(Kernel(sys.argv[2], "add", "P"), rt.buffer(1, "int32"))
    os.write(write, str(warmcli.report()).splitlines()[0].encode())
    os._exit(0)
os.close(write)
os.wait()
print(json.dumps(os.read(read, 4096).decode()))
"""


def test_the_report_of_a_bundle_removed_since_its_open_says_so_not_re_warm_it(
    warm: Warm, tmp_path: Path
) -> None:
    """A forked child of a process whose bundle file was removed (trial43a's as_file copy)
    compiled cold, and its report said the bundle 'lacked' them: 're-warm it with `warm
    run`', of a file no longer there; it says the file is gone."""
    workload = tmp_path / "adds.py"
    workload.write_text(ADDS.format(src=ADD.format(v=1)))
    bundle = tmp_path / "b.warm"
    assert warm("run", "-q", "-b", bundle, workload).returncode == 0
    said = warm.production(REMOVED, bundle, ADD.format(v=1))
    assert "compiled and tuned them itself" in said, said
    assert "re-warm it" not in said and "no file is at that path now" in said, said
