"""Faults review55b found trying review55's environment handling as users would, each failing
before its fix.

A thread of the workload unsetting a variable while warm read the environment whole (as a kernel
was queued, as a pass ended and restored the first's): warm read it a name at a time
(`os.environ.items()`), so the name listed, then gone, raised KeyError: `warm run` failed (the
workload's error, exit 2) or ended in a traceback. The thread's timing is made certain here: the
workload's `os.environ.decodevalue` unsets the variable at its first call, as a thread would
between two reads. And a unit queued in an environment changed in one variable (a step counter)
kept a decoded copy of every other value: 2,000 units under a 1 MB variable held 2 GB.
Real parts: the real CLI (forked) warms with the real cc, a real production process serves.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from fresh_python import fresh_env
from test_readme54 import SERVE

# The workload's `GONE`, unset by "another thread" at the next read of the environment whole.
RACING = """
import os
from warmcli import Kernel
DEVICE = "host"
A = Kernel("void a(int *y) { y[0] += 1; }", "a", "P")
B = Kernel("void b(int *y) { y[0] += 2; }", "b", "P")
def racing():
    os.environ["GONE"] = "1"
    real = os.environ.decodevalue
    def decode(value):  # another thread unsets GONE while the environment is read
        os.environ.decodevalue = real
        os.environ.pop("GONE", None)
        return real(value)
    os.environ.decodevalue = decode
def workload(rt):
    y = rt.buffer(1, "int32")
    rt.launch(A, y)
    racing()
    rt.launch(%s, y)
    return [y]
"""


def test_a_variable_a_thread_unsets_as_a_kernel_is_queued_fails_no_run(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """Before: `warm: error: workload raised during CompileOnly: ...: KeyError: 'GONE'` (exit
    2), raised by warm's read of the environment as `b` was queued, where the workload runs."""
    path, bundle = workload_file(RACING % "B"), tmp_path / "b.warm"
    assert warm.production(SERVE, path) == [3]  # cold
    done = warm("run", path, "-b", bundle, "--quiet")
    assert done.returncode == 0, done.stderr + done.stdout
    assert warm.production(SERVE, path, bundle=bundle) == [3]


def test_a_variable_a_thread_unsets_as_a_pass_ends_is_no_traceback(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """Before: the pass's end, restoring the environment it began in, read it a name at a time:
    a traceback ending `KeyError: 'GONE'` (exit 1)."""
    path, bundle = workload_file(RACING % "A"), tmp_path / "b.warm"
    done = warm("run", path, "-b", bundle, "--quiet")
    said = done.stderr + done.stdout
    assert done.returncode == 0 and "Traceback" not in said, said
    assert warm.production(SERVE, path, bundle=bundle) == [2]


# 500 units queued, each after the workload set a step counter, under a 1 MB variable.
QUEUE_UNDER_BIG = """
import os
os.environ["BIG"] = "x" * (1 << 20)
from warmcli.backends.compiler import CompileUnit
from warmcli.kernel import Kernel
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 >> 20
kernel, before, units, decoded = Kernel("void f(int *y) { }", "f", "P"), rss(), [], []
def counted(value, decode=os.environ.decodevalue):
    decoded.append(len(value))
    return decode(value)
os.environ.decodevalue = counted
for i in range(500):
    os.environ["STEP"] = str(i)
    units.append(CompileUnit.queued("%064d" % i, kernel, "x86_64"))
first, last = dict(units[0].environ), dict(units[-1].environ)
assert (first["STEP"], last["STEP"]) == ("0", "499")
print(rss() - before, first["BIG"] is last["BIG"], sum(decoded) >> 20)
"""


def test_units_queued_in_environments_alike_but_one_variable_share_the_others() -> None:
    """Before: each unit decoded the whole environment anew: 500 MB for 500 units (a 1 MB
    variable, a step counter set before each queue); now the 1 MB value is one string, decoded
    once (185 us a queue before, 37 now)."""
    if not Path("/proc/self/statm").exists():
        import pytest

        pytest.skip("no /proc")
    done = subprocess.run(
        [sys.executable, "-c", QUEUE_UNDER_BIG],
        env=fresh_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    grown, shared, decoded = done.stdout.split()
    assert shared == "True" and int(grown) < 100, done.stdout
    assert int(decoded) < 2, done.stdout  # MB decoded in all: the 1 MB value once


# A library that sets CPATH at its import, imported by the workload after its first launch.
SETS_AT_IMPORT = 'import os\nos.environ["CPATH"] = os.path.join(os.path.dirname(__file__), "inc")\n'
IMPORTED_LATE = """
import os, sys
from warmcli import Kernel
DEVICE = "host"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
PLAIN = Kernel("void hundred(int *y) { y[0] = 100; }", "hundred", "P")
CFG = Kernel('#include "cfg.h"\\nvoid cfg(int *y) { y[0] += K; }', "cfg", "P")
def workload(rt):
    y = rt.buffer(1, "int32")
    rt.launch(PLAIN, y)
    import sets_cpath55b  # (imported once a process: the next pass finds it imported)
    rt.launch(CFG, y)
    return [y]
"""


def test_a_variable_a_module_set_at_its_import_is_kept_for_the_next_pass(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """Before: each pass started in the environment the first began in, which undid the CPATH
    the library set at its import in the first pass, never imported again: the verify pass
    could not compile `cfg` ('cfg.h: No such file or directory', exit 2) where a cold start
    (and warm before review55) computes 107."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "cfg.h").write_text("#define K 7\n")
    (tmp_path / "sets_cpath55b.py").write_text(SETS_AT_IMPORT)
    path, bundle = workload_file(IMPORTED_LATE), tmp_path / "b.warm"
    assert warm.production(SERVE, path) == [107]  # cold
    done = warm("run", path, "-b", bundle, "--quiet")
    assert done.returncode == 0, done.stderr + done.stdout
    assert warm.production(SERVE, path, bundle=bundle) == [107]
