"""Review of stop 43's leftovers (the at-exit status kept by `_EndsAs`, pickled warm errors,
the note of forked children's launches): a production process whose stop signal's handler's
failing `sys.exit` cut its write-back short ended by `os._exit`, which skipped what the C
library does at an exit (a native library's `printf` to a pipe or a file lost, its exit
functions and destructors not run); a `SystemExit` whose code is beyond a C int printed an
"Exception ignored" traceback and ended 0; an `_EndsAs` collected before the interpreter's
teardown (a program's own exit function that replaced it) ended the process there, the exit
functions after it skipped; a child the workload forked that closed its inherited descriptors
and opened files of its own had its pid written into the one numbered as the pass's pipe was
(a user's file changed), and a hostile child that wrote a number of 5,000 digits into that pipe
ended `warm run` with a traceback; a workload's `fork` pool ended by `with` (`terminate`) hung
`warm run` for ever, a worker having inherited warm's Python-level SIGTERM handler; a fork
process pool's task that caught a GPU-less pre-build's refusal and returned it failed the run.
A stop's `sys.exit("text")` in the write-back ended 1 without its text.
The real CLI and production processes in subprocesses, real SQLite files, the real C compiler."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from held_lock import WORKLOAD, stopped_in_write_back

ROOT = Path(__file__).resolve().parent.parent


def _env(tmp: Path, **more: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    base.pop("PYTHONUNBUFFERED", None)  # C's stdout buffered, as a service's is
    return dict(base, PYTHONPATH=str(ROOT), WARM_HOME=str(tmp / "home"), **more)


def _warm(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warmcli", *args],
        env=_env(tmp),
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=90,
    )


# A native library whose exit function and destructor each leave a file, as a profiler's or
# a logger's would: run by C's `exit`, never by `_exit`.
NATIVE = r"""
#include <stdio.h>
#include <stdlib.h>
static void mark(const char *what) {
    const char *dir = getenv("MARKS");
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, what);
    FILE *f = fopen(path, "w");
    if (f) { fputs(what, f); fclose(f); }
}
static void at_exit(void) { mark("atexit"); }
__attribute__((destructor)) static void gone(void) { mark("destructor"); }
void start(void) { atexit(at_exit); printf("from C\n"); }
"""


def _native(tmp: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    (tmp / "native.c").write_text(NATIVE)
    lib = tmp / "libnative.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(tmp / "native.c")], check=True)
    return lib


def _ends(tmp: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Runs `code` in a fresh process (C's stdout a pipe, buffered), its status and output."""
    return subprocess.run(
        [sys.executable, "-c", code],
        env=_env(tmp, MARKS=str(tmp)),
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=60,
    )


# warm's at-exit write-back cut short by a stop's SystemExit: `end_as_stopped`, as warm's
# exit handler calls it last (here from the main code's end: the same teardown follows).
ENDS = """
import atexit, ctypes, sys
from warmcli.interrupted import end_as_stopped
atexit.register(lambda: open("ran", "w").write("ran"))  # (before warm's: runs after it)
ctypes.CDLL(sys.argv[1]).start()
end_as_stopped(SystemExit({code}))
"""


@pytest.mark.parametrize(("code", "status"), [("3", 3), ("2**70", 255), ("-1", 255)])
def test_a_kept_status_ends_the_process_as_c_does(tmp_path: Path, code: str, status: int) -> None:
    lib = _native(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", ENDS.format(code=code), str(lib)],
        env=_env(tmp_path, MARKS=str(tmp_path)),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == status, done.stderr  # 2**70: Python's own -1 (was 0)
    assert done.stderr == "", done.stderr  # was "Exception ignored in: <function _EndsAs..."
    assert done.stdout == "from C\n"  # C's buffered stdout flushed (was lost)
    assert (tmp_path / "atexit").read_text() == "atexit"  # C's exit functions ran
    assert (tmp_path / "destructor").read_text() == "destructor"
    assert (tmp_path / "ran").read_text() == "ran"


REPLACED = """
import atexit, sys
from warmcli.interrupted import end_as_stopped
atexit.register(lambda: open("ran", "w").write("ran"))
atexit.register(lambda: setattr(sys, "_warm_ends_as", None))  # a program's own, odd
end_as_stopped(SystemExit(3))
"""


def test_a_status_collected_before_the_teardown_skips_no_exit_function(tmp_path: Path) -> None:
    done = _ends(tmp_path, REPLACED)
    assert (tmp_path / "ran").read_text() == "ran"  # was skipped: os._exit at once
    assert done.stderr == "", done.stderr
    assert done.returncode == 0  # the status is lost with the object, nothing else


# A server stopped by SIGTERM (`sys.exit(3)`) while its write-back waits for a lock, its
# output a file; a native library printed to it with C's stdio.
PRODUCE = """
import ctypes, signal, sys
def stop(*_):
    sys.exit(int(sys.argv[4]) if sys.argv[4].isdigit() else sys.argv[4])
signal.signal(signal.SIGTERM, stop)
sys.path.insert(0, sys.argv[2])
import warmcli, work
warmcli.use_bundle(sys.argv[1])
rt = warmcli.runtime("host")
for o in work.workload(rt):
    rt.read(o)
print("served", flush=True)
ctypes.CDLL(sys.argv[3]).start()
sys.stdin.readline()
"""


@pytest.mark.parametrize(("asked", "status", "said"), [("3", 3, ""), ("stopping", 1, "stopping\n")])
def test_a_stop_in_the_write_back_keeps_what_c_printed(
    tmp_path: Path, asked: str, status: int, said: str
) -> None:
    lib = _native(tmp_path)
    (tmp_path / "work.py").write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    made = _warm(tmp_path, "run", "work.py", "-b", str(bundle), "-q")
    assert made.returncode == 0, made.stderr
    with sqlite3.connect(bundle) as conn:
        before = sorted(conn.execute("SELECT key, sha256 FROM kernels").fetchall())
    out = tmp_path / "out.txt"
    env = _env(tmp_path, WARM_BUNDLE_WRITE="1", DIVS="3,5", MARKS=str(tmp_path))
    with out.open("w") as sink:
        produce = subprocess.Popen(
            [sys.executable, "-c", PRODUCE, str(bundle), str(tmp_path), str(lib), asked],
            env=env,
            stdin=subprocess.PIPE,
            stdout=sink,
            stderr=subprocess.PIPE,
            text=True,
        )
    deadline = time.monotonic() + 60
    while "served" not in out.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    err = stopped_in_write_back(produce, bundle)
    # a text's SystemExit: its text printed, as Python prints it (was lost), and status 1
    assert err == "warm: could not write back into the bundle: interrupted\n" + said, err
    assert produce.returncode == status
    assert out.read_text() == "served\nfrom C\n"  # was "served\n": C's buffer lost
    assert (tmp_path / "atexit").exists() and (tmp_path / "destructor").exists()
    with sqlite3.connect(bundle) as conn:
        assert sorted(conn.execute("SELECT key, sha256 FROM kernels").fetchall()) == before
    verified = _warm(tmp_path, "verify", str(bundle))
    assert verified.returncode == 0, verified.stdout + verified.stderr


# A child the workload forked that closes the descriptors it inherited (as a daemon does) and
# opens files of its own, one of which takes the number of the pass's pipe, then launches.
TIDY_CHILD = """
import os
from warmcli import Kernel

DEVICE = "host"
SRC = "void own(double *o, int n) { o[0] = 2; }"


def workload(rt):
    o = rt.buffer(4, "float64")
    rt.launch(Kernel(SRC, "own", "Pi"), o, 4)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.closerange(3, 256)
            files = [open("data%d.txt" % i, "w") for i in range(40)]
            for f in files:
                f.write("mine\\n")
                f.flush()
            rt.launch(Kernel(SRC, "own", "Pi"), o, 4)
            for f in files:
                f.close()
        except BaseException:
            code = 1
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert status == 0, status
"""


def test_a_forked_childs_launch_writes_nothing_into_its_own_files(tmp_path: Path) -> None:
    (tmp_path / "kid.py").write_text(TIDY_CHILD)
    done = _warm(tmp_path, "run", "kid.py", "-b", "k.warm", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    written = sorted(tmp_path.glob("data*.txt"))
    assert len(written) == 40
    for path in written:  # was: one held the child's pid (warm wrote it into the pipe's number)
        assert path.read_text() == "mine\n", (path.name, path.read_text())


# A hostile child: it writes what is no pid into the pass's pipe (warm's own descriptor).
GARBAGE_CHILD = """
import os
from warmcli import Kernel
from warmcli.warming import forked_launches

DEVICE = "host"
SRC = "void own(double *o, int n) { o[0] = 2; }"


def workload(rt):
    o = rt.buffer(4, "float64")
    pid = os.fork()
    if pid == 0:
        if forked_launches._WATCHED:
            os.write(forked_launches._WATCHED[0][1], b"9" * 5000 + b"\\n\\x1b[31mred\\n")
        rt.launch(Kernel(SRC, "own", "Pi"), o, 4)
        os._exit(0)
    os.waitpid(pid, 0)
"""


def test_what_a_child_writes_into_the_pipe_never_ends_the_run(tmp_path: Path) -> None:
    (tmp_path / "junk.py").write_text(GARBAGE_CHILD)
    done = _warm(tmp_path, "run", "junk.py", "-b", "j.warm", "-q")
    assert done.returncode == 0, done.stderr  # was 1: ValueError (int's 4,300 digits) traceback
    assert "Traceback" not in done.stderr and "\x1b" not in done.stdout + done.stderr
    said = [line for line in done.stdout.splitlines() if "child process(es)" in line]
    assert said and said[0].startswith("  note: 3 child process(es) the workload forked (pid ")


# A fork start method's process pool task meets a GPU-less pre-build's refusal (a call that
# needs a GPU) and goes on: it returns the error it caught (or, as a failure, a group of it).
RETURNED = """
import concurrent.futures
import multiprocessing as mp
import os

import pycuda.autoinit  # noqa: F401
import pycuda.driver as drv


def work(i):
    try:
        drv.get_driver_version()
    except RuntimeError as e:
        if os.environ["HOW"] == "group":
            raise ExceptionGroup("tasks", [e])
        return e


def main():
    ctx = mp.get_context("fork")
    if os.environ.get("KIND") == "pool":
        with ctx.Pool(2) as pool:
            print([type(r).__name__ for r in pool.map(work, range(2))])
        return
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        futures = [pool.submit(work, i) for i in range(2)]
    if os.environ["HOW"] == "return":  # (a group's never read)
        print([type(f.result()).__name__ for f in futures])
"""


@pytest.mark.parametrize(
    ("how", "kind"), [("return", "executor"), ("return", "pool"), ("group", "")]
)
def test_a_process_pool_task_that_caught_the_refusal_and_returned_it_passes(
    tmp_path: Path, how: str, kind: str
) -> None:
    (tmp_path / "pool.py").write_text(RETURNED)
    args = ("run", "pool.py", "--entry", "main", "--pycuda", "--arch", "sm_80", "-q")
    env = _env(tmp_path, HOW=how, KIND=kind)
    done = subprocess.run(
        [sys.executable, "-m", "warmcli", *args, "-b", "p.warm"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=90,
    )
    if how == "group":  # a task ended by a group holding it fails the run, as a thread's does
        assert done.returncode == 2, done.stdout + done.stderr
        assert "in a task of a process pool: DeviceError: " in done.stderr, done.stderr
        return
    # caught and gone on, as a thread pool's task that returns it: no failure (was status 2)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "['DeviceError', 'DeviceError']" in done.stdout, done.stdout


# A workload that ends its `fork` pools as `with` does (`terminate`: SIGTERM to each worker),
# and says what a worker's SIGTERM does.
POOLS = """
import multiprocessing as mp
import signal

from warmcli import Kernel

DEVICE = "host"


def disposition(_):
    return signal.getsignal(signal.SIGTERM) == signal.SIG_DFL


def workload(rt):
    o = rt.buffer(4, "float64")
    rt.launch(Kernel("void own(double *o, int n) { o[0] = 2; }", "own", "Pi"), o, 4)
    ctx = mp.get_context("fork")
    with ctx.Pool(2) as pool:
        print("default SIGTERM in a worker:", all(pool.map(disposition, range(4))))
    for _ in range(12):
        with ctx.Pool(2) as pool:
            pool.map(abs, range(4))
"""


def test_a_pool_the_workload_terminates_ends_as_without_warm(tmp_path: Path) -> None:
    (tmp_path / "pools.py").write_text(POOLS)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "warmcli", "run", "pools.py", "-b", "p.warm", "-q"],
            env=_env(tmp_path),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=40,  # was for ever: a worker SIGTERM reached just before it waited
        )
    except subprocess.TimeoutExpired:
        pytest.fail("warm run hung in a pool's terminate")
    assert done.returncode == 0, done.stderr
    # as under Python (was warm's handler, run only between two bytecodes)
    assert "default SIGTERM in a worker: True" in done.stdout + done.stderr
