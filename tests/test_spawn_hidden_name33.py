"""A workload whose file name hides one of Python's modules (`test.py`, `calendar.py`) and
maps a function of its own over a `spawn` or `forkserver` pool.

Such a file cannot be known by its own name (that would hide Python's module from the
workload and everything it imports), so its functions are named as of warm's private
module name. The pool's workers unpickle a function by its module's name: they could not
import that one, died at once, and the pool started new ones for ever: `warm run` hung.
The workers now import it by that name from a stub that runs the file (its `__file__` its
own), as Python's workers import `__main__`'s; the stubs' folder is gone after the run.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

WORKLOAD = """import multiprocessing as mp
import os
from concurrent.futures import ProcessPoolExecutor
import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void k(float *y, long n) { for (long i = 0; i < n; i++) y[i] *= 2; }", "k", "Pl")
def prep(i):
    return float(i) * 1.5
def where(_):
    return __file__, __name__ == "__main__"
def workload(rt):
    ctx = mp.get_context("{method}")
    with ctx.Pool(1) as pool:
        values = pool.map(prep, range(4))
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:
        print("worker sees", *pool.submit(where, 0).result())
    y = rt.upload(np.array(values, np.float32))
    rt.launch(K, y, 4)
    return y
"""


@pytest.mark.parametrize(("name", "method"), [("test.py", "spawn"), ("calendar.py", "forkserver")])
def test_a_workload_hiding_a_python_module_runs_its_spawn_pool(
    warm: Warm, tmp_path: Path, name: str, method: str
) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    workload = folder / name
    workload.write_text(WORKLOAD.replace("{method}", method))
    # a short TMPDIR of its own (a forkserver's socket path must fit AF_UNIX's 108 bytes)
    with tempfile.TemporaryDirectory(prefix="w33", dir="/tmp") as temp:
        warm.env["TMPDIR"] = temp
        done = warm("run", workload, "-b", tmp_path / "b.warm", timeout=120)
        assert done.returncode == 0, done.stderr
        assert "stored 1 new kernel(s)" in done.stdout, done.stdout
        assert f"worker sees {workload} False" in done.stdout, done.stdout
        assert not [p for p in os.listdir(temp) if p.startswith("warm-workers-")]


def test_a_workload_hiding_a_python_module_still_sees_python_s(warm: Warm, tmp_path: Path) -> None:
    """The stub changes no name the workload imports: `import calendar` beside `calendar.py`
    gets the file itself, as `python calendar.py` does (its folder is first on `sys.path`),
    and a module it imports that imports Python's `test` gets the same."""
    workload = tmp_path / "calendar.py"
    workload.write_text(
        "import calendar, sys\n"
        "from warmcli import Kernel\n"
        "def workload(rt):\n"
        "    print('calendar is', calendar.__file__)\n"
    )
    done = warm("run", workload, "-b", tmp_path / "b.warm", timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"calendar is {workload}" in done.stdout, done.stdout
