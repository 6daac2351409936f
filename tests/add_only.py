"""A bundle holding `add` only, and the kernels `add`, `mul` and `sub` a served process may
launch beside it: what the tests of reports, strict refusals and write-backs after
`production.close()` start from (tests/test_review43d.py, test_trial48c.py, test_review48e.py).
`warmed` makes it with `warm run`; the `warmed_here` fixture copies what one such run left
(made once per test process, `warmed_once`) into the test's own folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from conftest import Warm

KERNELS = """
from warmcli import Kernel

ADD = Kernel("void add(const float*a,float*o,int n){for(int i=0;i<n;i++)o[i]=a[i]+1;}",
             "add", "PPi")
MUL = Kernel("void mul(const float*a,float*o,int n){for(int i=0;i<n;i++)o[i]=a[i]*2;}",
             "mul", "PPi")
SUB = Kernel("void sub(const float*a,float*o,int n){for(int i=0;i<n;i++)o[i]=a[i]-1;}",
             "sub", "PPi")
"""


def warmed(warm: Warm, tmp_path: Path) -> None:
    """`kernels.py` and `b.warm` in `tmp_path`, the bundle holding `add` only."""
    (tmp_path / "kernels.py").write_text(KERNELS)
    (tmp_path / "w.py").write_text(
        "import numpy as np\nfrom kernels import ADD\n\ndef workload(rt):\n"
        "    x, o = rt.upload(np.ones(4, np.float32)), rt.buffer(4)\n"
        "    rt.launch(ADD, x, o, 4)\n"
    )
    proc = warm("run", "w.py", "-b", "b.warm", "-q", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture(scope="session")
def warmed_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder as `warmed` leaves it (`kernels.py`, `w.py`, `b.warm`), with `home`, the warm
    home of the run that made it (conftest's `warm` environment): once per test process."""
    base = tmp_path_factory.mktemp("add-only-once")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warmed(Warm(dict(env, WARM_HOME=str(base / "home"), COLUMNS="200")), base)
    return base


@pytest.fixture
def warmed_here(warm: Warm, tmp_path: Path, warmed_once: Path) -> None:
    """`warmed(warm, tmp_path)`'s outcome, copied from `warmed_once` (its home as `warm`'s
    home, conftest's `tmp_path / "home"`), as that run there would have left it."""
    assert warm.env["WARM_HOME"] == str(tmp_path / "home")
    shutil.copytree(warmed_once, tmp_path, dirs_exist_ok=True, symlinks=True)
