"""Leftovers of stop 42, fixed at stop 43: a kernel that fails to compile in a process pool's
task (`ProcessPoolExecutor`, `multiprocessing.Pool`; fork and spawn) fails the pre-build with
its line, as in a thread's, where before its `KernelCompileError` could not be unpickled in the
parent (a broken executor; a `Pool` hung for ever), and so does a fork start method's process
pool task ended by a GPU-less pre-build's want of a GPU, its future unread; a production process
whose SIGTERM handler's `sys.exit(3)` cut its write-back short ends with 3 once every exit
function has run, where it ended with its main code's 0; a run whose workload forked children
that launched says so in a note of each pass (nothing of theirs is stored); ARCHITECTURE.md
lists every module. The real CLI, real SQLite files, the real C compiler; each `warm`
command a fork of a process that imported the CLI once (`tests/forked_cli.py`: none here is
of how warm starts; the SIGTERM'd production process is started), so a workload's
parameters are written into its source, not its environment (one server an environment)."""

from __future__ import annotations

import os
import pickle
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from held_lock import WORKLOAD, stopped_in_write_back

from warmcli.errors import CompileFailure, KernelCompileError, StrictMissError
from warmcli.kernel import Kernel
from warmcli.records import MissExplanation

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def warm(forked: Any, tmp_path: Path) -> Any:
    """`python -m warmcli` in `tmp_path` (its home there), each command forked."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    environ = dict(base, PYTHONPATH=str(ROOT), WARM_HOME=str(tmp_path / "home"))
    return forked(Warm(environ))


def _warm(warm: Any, tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return warm(*args, cwd=tmp, timeout=90)  # type: ignore[no-any-return]


def _written(path: Path, source: str, **params: str) -> None:
    """`source` with each `params` name (`METHOD`) replaced by its value, quoted."""
    for name, value in params.items():
        source = source.replace(name, repr(value))
    path.write_text(source)


POOLED = """
import concurrent.futures
import multiprocessing as mp
import os

import warmcli
from warmcli import Kernel

DEVICE = "host"


def work(i):
    rt = warmcli.runtime("host")
    o = rt.buffer(4, "float64")
    body = "o[0] = nope;" if i else "o[0] = 1;"
    rt.launch(Kernel("void f%d(double *o, int n) { %s }" % (i, body), "f%d" % i, "Pi"), o, 4)
    return i


def workload(rt):
    ctx = mp.get_context(METHOD)
    if KIND == "executor":
        with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
            list(pool.map(work, range(2)))
    else:
        with ctx.Pool(2) as pool:
            pool.map(work, range(2))
"""


def test_warm_errors_survive_pickling() -> None:
    """A process pool's task hands what it raised to its parent pickled."""
    kernel = Kernel("void f(double *o, int n) { }", "f", "Pi")
    error = KernelCompileError(kernel, CompileFailure("f.c:1:2: error: nope"))
    error.notes_before = ("a note",)
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is KernelCompileError and str(back) == str(error)
    assert back.kernel == kernel and back.log == error.log and back.notes_before == ("a note",)
    miss = MissExplanation("kernel", "k" * 64, "f", "new", "no entry")
    strict = pickle.loads(pickle.dumps(StrictMissError(miss)))
    assert str(strict) == str(StrictMissError(miss)) and strict.explanation == miss


@pytest.mark.parametrize(
    ("method", "kind"), [("fork", "pool"), ("spawn", "executor"), ("fork", "executor")]
)
def test_a_compile_error_in_a_process_pools_task_fails_the_prebuild(
    warm: Any, tmp_path: Path, method: str, kind: str
) -> None:
    _written(tmp_path / "pooled.py", POOLED, METHOD=method, KIND=kind)
    done = _warm(warm, tmp_path, "run", "pooled.py", "-b", "p.warm", "-q")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("warm: error: workload raised during "), done.stderr
    assert "KernelCompileError: kernel f1 failed to compile" in done.stderr, done.stderr
    assert "BrokenProcessPool" not in done.stderr and "Traceback" not in done.stderr


# A server's way: `sys.exit(3)` on SIGTERM (its status under Python where it ends its main
# code); an exit function and a logging handler set up before warm's import.
PRODUCE = """
import atexit, logging, signal, sys
def stop(*_):
    sys.exit(3)
signal.signal(signal.SIGTERM, stop)
logging.basicConfig(filename=sys.argv[3])
atexit.register(lambda: open(sys.argv[4], "w").write("ran"))
sys.path.insert(0, sys.argv[2])
import warmcli, work
warmcli.use_bundle(sys.argv[1])
rt = warmcli.runtime("host")
for o in work.workload(rt):
    rt.read(o)
logging.getLogger("app").warning("served")
print("served", flush=True)
sys.stdin.readline()
"""


def _rows(bundle: Path) -> list[tuple[object, ...]]:
    with sqlite3.connect(bundle) as conn:
        return sorted(conn.execute("SELECT key, sha256 FROM kernels").fetchall())


def test_sigterm_in_a_write_back_ends_with_its_code_after_the_exit_handlers(
    warm: Any, tmp_path: Path
) -> None:
    (tmp_path / "work.py").write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    made = _warm(warm, tmp_path, "run", "work.py", "-b", str(bundle), "-q")
    assert made.returncode == 0, made.stderr
    before = _rows(bundle)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(PYTHONPATH=str(ROOT), WARM_HOME=str(tmp_path / "home"), WARM_BUNDLE_WRITE="1")
    log, ran = tmp_path / "app.log", tmp_path / "ran"
    argv = [sys.executable, "-c", PRODUCE, str(bundle), str(tmp_path), str(log), str(ran)]
    produce = subprocess.Popen(
        argv,
        env=dict(env, DIVS="3,5"),  # (5: a miss, to write back)
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert produce.stdout is not None and produce.stdout.readline() == "served\n"
    err = stopped_in_write_back(produce, bundle)
    assert err == "warm: could not write back into the bundle: interrupted\n", err
    assert produce.returncode == 3, produce.returncode  # was 0: the main code's status
    assert ran.read_text() == "ran" and "served" in log.read_text()  # they still ran
    assert _rows(bundle) == before  # nothing written, nothing lost
    verified = _warm(warm, tmp_path, "verify", str(bundle))
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_the_module_map_lists_every_module_and_no_other() -> None:
    """ARCHITECTURE.md names every module of the package, in its folder's section, once."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    listed: list[str] = []
    folder = None
    for line in text.splitlines():
        if line.startswith("## `warmcli/"):
            folder = line[len("## `warmcli/") :].rstrip("`")
        elif line.startswith("- `") and folder is not None:
            listed.append(folder + line[3:].split("`", 1)[0])
    package = ROOT / "warmcli"
    found = sorted(str(p.relative_to(package)) for p in package.rglob("*.py"))
    assert sorted(listed) == found
    assert len(listed) == len(set(listed))


CHILDREN_SOURCE = """
import multiprocessing as mp
import os

import warmcli
from warmcli import Kernel

DEVICE = "host"


def work(i):
    rt = warmcli.runtime("host")
    o = rt.buffer(4, "float64")
    rt.launch(Kernel("void c%d(double *o, int n) { o[0] = 1; }" % i, "c%d" % i, "Pi"), o, 4)
    return i


def workload(rt):
    o = rt.buffer(4, "float64")
    rt.launch(Kernel("void own(double *o, int n) { o[0] = 2; }", "own", "Pi"), o, 4)
    if CHILDREN:
        with mp.get_context("fork").Pool(2) as pool:
            pool.map(work, range(2))
"""


@pytest.mark.parametrize("children", ["", "1"])
def test_a_run_says_what_children_it_forked_launched_is_not_stored(
    warm: Any, tmp_path: Path, children: str
) -> None:
    _written(tmp_path / "kids.py", CHILDREN_SOURCE, CHILDREN=children)
    done = _warm(warm, tmp_path, "run", "kids.py", "-b", "k.warm", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    said = [line for line in done.stdout.splitlines() if "child process(es)" in line]
    if not children:
        assert said == [], done.stdout
        return
    assert len(said) == 1, done.stdout  # once, naming each pass (leftovers43b)
    # (2 workers, 2 tasks a pass: a loaded machine may have one worker take both, so 1 or 2
    # launched in each of the 3 passes, all counted in the one note: ship59)
    counted = (f"  note: {n} child process(es) the workload forked (pid " for n in range(3, 7))
    assert said[0].startswith(tuple(counted)), said
    every = "CompileOnly, CompileAndAutotune and Verify (Execute)"
    assert f"during {every}: a child process is not seen, what it compiles is neither" in said[0]
    assert "stored 1 new kernel(s)" in done.stdout  # the workload's own, only


PROCESS_POOL = """
import concurrent.futures
import multiprocessing as mp
import os

import pycuda.autoinit  # noqa: F401
import pycuda.driver as drv


def work(i):
    try:
        drv.get_driver_version()
    except RuntimeError:
        if not CAUGHT:
            raise


def main():
    ctx = mp.get_context("fork")
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=ctx) as pool:
        for i in range(2):
            pool.submit(work, i)  # its future never read
"""


@pytest.mark.parametrize("caught", ["", "1"])
def test_a_process_pool_task_ended_by_a_gpu_less_prebuilds_want_of_a_gpu_fails_it(
    warm: Any, tmp_path: Path, caught: str
) -> None:
    _written(tmp_path / "pool.py", PROCESS_POOL, CAUGHT=caught)
    args = ("run", "pool.py", "--entry", "main", "--pycuda", "--arch", "sm_80", "-q")
    done = _warm(warm, tmp_path, *args, "-b", "p.warm")
    if caught:  # a task that caught it and went on: as a thread that does
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == (
        "warm: error: workload raised during CompileOnly in a task of a process pool: "
        "DeviceError: pycuda.driver.get_driver_version() needs a GPU: compile-only for sm_80 "
        "(warm run --arch), none here\n"
    ), done.stderr
