"""Leftovers of stop 42, fixed at stop 43: a kernel that fails to compile in a process pool's
task (`ProcessPoolExecutor`, `multiprocessing.Pool`; fork and spawn) fails the pre-build with
its line, as in a thread's, where before its `KernelCompileError` could not be unpickled in the
parent (a broken executor; a `Pool` hung for ever). The real CLI in subprocesses, real SQLite
files, the real C compiler."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from warmcli.errors import CompileFailure, KernelCompileError, StrictMissError
from warmcli.kernel import Kernel
from warmcli.records import MissExplanation

ROOT = Path(__file__).resolve().parent.parent


def _warm(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    environ = dict(base, PYTHONPATH=str(ROOT), WARM_HOME=str(tmp / "home"), **env)
    return subprocess.run(
        [sys.executable, "-m", "warmcli", *args],
        env=environ,
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=90,
    )


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
    ctx = mp.get_context(os.environ["METHOD"])
    if os.environ["KIND"] == "executor":
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
    tmp_path: Path, method: str, kind: str
) -> None:
    (tmp_path / "pooled.py").write_text(POOLED)
    done = _warm(tmp_path, "run", "pooled.py", "-b", "p.warm", "-q", METHOD=method, KIND=kind)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("warm: error: workload raised during "), done.stderr
    assert "KernelCompileError: kernel f1 failed to compile" in done.stderr, done.stderr
    assert "BrokenProcessPool" not in done.stderr and "Traceback" not in done.stderr
