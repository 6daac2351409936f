"""A project's own pytest suite as the warm-up (trial43b): `warm run` of a module calling
`pytest.main`, whose runner catches what warm raises into the workload (Ctrl-C's
`KeyboardInterrupt`, a discarding pass's refused read) and goes on. Real CLI, real pytest,
real C compiler."""

from __future__ import annotations

from pathlib import Path

from conftest import Warm

KERNELS = """
import numpy as np
from warmcli import Kernel

ADD = Kernel("void add(const float*a,float*o,int n){for(int i=0;i<n;i++)o[i]=a[i]+1;}",
             "add", "PPi")
MUL = Kernel("void mul(const float*a,float*o,int n){for(int i=0;i<n;i++)o[i]=a[i]*2;}",
             "mul", "PPi")
"""

WARMUP = """
import os
import pytest


def workload(rt):
    pytest.main(["-q", "-p", "no:cacheprovider", "--rootdir", os.getcwd(), "tests"])
"""


def _project(tmp_path: Path, test_body: str) -> Path:
    """A project in `tmp_path`: `kernels.py`, `warmup.py` (runs its suite) and `tests/`."""
    (tmp_path / "kernels.py").write_text(KERNELS)
    (tmp_path / "warmup.py").write_text(WARMUP)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text(
        "import os, sys\nsys.path.insert(0, os.path.dirname(os.path.dirname(__file__)))\n"
    )
    (tmp_path / "tests" / "test_one.py").write_text(test_body)
    return tmp_path


STOPS_ITSELF = """
import os, signal
import numpy as np
import warmcli
from kernels import ADD


def test_stopped():
    with open("ran.count", "a") as f:
        f.write("x")
    rt = warmcli.runtime()
    o = rt.buffer(4)
    rt.launch(ADD, rt.upload(np.ones(4, np.float32)), o, 4)
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C reaching the worker mid-suite
"""


def test_ctrl_c_that_pytest_catches_still_stops_the_run(warm: Warm, tmp_path: Path) -> None:
    """pytest catches `KeyboardInterrupt` (its `INTERRUPTED` exit) and `pytest.main` returns:
    warm's stop must not be lost there (it went on to the next passes, its compiles refused,
    and exited 1 naming a miss), but end the run as any Ctrl-C does, exit 130."""
    project = _project(tmp_path, STOPS_ITSELF)
    proc = warm("run", "warmup.py", "-b", "b.warm", cwd=project, timeout=120)
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert "interrupted" in proc.stderr
    assert "miss:" not in proc.stdout + proc.stderr
    assert (project / "ran.count").read_text() == "x"  # no later pass ran the suite again
