"""Holes hostile41 found in what the last stop added, each reproduced for real: real cc,
real libraries, the real CLI in a subprocess (no fake of anything)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy
from conftest import ROOT, Warm

WORKLOAD = """
import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel('''
void scale(float *x, int n) { for (int i = 0; i < n; i++) x[i] = 2.0f * x[i]; }
''', "scale", "Pi", options=("-LLIBDIR", "-Wl,--no-as-needed", "-l:LIBNAME"))
def workload(rt):
    x = rt.upload(np.arange(8, dtype=np.float32))
    rt.launch(K, x, 8)
    return x
"""
SERVE = """
import runpy, sys, warmcli
m = runpy.run_path(sys.argv[1])
rt = warmcli.runtime("host")
print(rt.read(m["workload"](rt)).tolist())
"""


def _numpys_library() -> Path:
    """A library numpy's own extension needs from a folder no loader search names (a
    wheel's `numpy.libs`): loaded in every warm process, since warm imports numpy."""
    folder = Path(numpy.__file__).resolve().parent.parent / "numpy.libs"
    found = sorted(folder.glob("lib*.so*")) if folder.is_dir() else []
    if not found:
        import pytest

        pytest.skip("this numpy keeps no libraries of its own in numpy.libs")
    return found[0]


def test_a_library_every_warm_process_has_loaded_is_servable(warm: Warm, tmp_path: Path) -> None:
    """glibc's loader matches a needed name against the objects already loaded before it
    searches a folder: a host blob needing numpy's own bundled library (in `numpy.libs`,
    which no RPATH, cache or default folder names) loads in every warm process, since warm
    imports numpy. `warm check` searched the folders alone and called it not servable
    ("loading it would fail", exit 1) while production served it strictly."""
    library = _numpys_library()
    workload = tmp_path / "wl.py"
    workload.write_text(
        WORKLOAD.replace("LIBDIR", str(library.parent)).replace("LIBNAME", library.name)
    )
    bundle = tmp_path / "b.warm"
    made = warm("run", workload, "-b", bundle, "-q")
    assert made.returncode == 0, made.stderr + made.stdout
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_STRICT="1")
    served = subprocess.run(
        [sys.executable, "-c", SERVE, workload], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert served.returncode == 0, served.stderr[-1500:]
    assert json.loads(served.stdout) == [2.0 * i for i in range(8)]
    checked = warm("check", bundle, "--json")
    assert checked.returncode == 0, checked.stdout[-1500:] + checked.stderr[-1500:]
    assert json.loads(checked.stdout)["unservable"] == []
    assert os.path.basename(library) not in checked.stdout
