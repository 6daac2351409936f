"""Stop 42's interactive-user trial: a notebook given to `warm run`, and a script re-run in one
long-lived process (`%run`, `runpy.run_path`), as a researcher works in IPython or Jupyter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from conftest import ROOT
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

NOTEBOOK = '{"cells": [{"cell_type": "code", "source": ["%timeit 1\\n"]}], "nbformat": 4}\n'


def test_a_notebook_is_told_how_to_make_a_workload_of_it(warm: Any, tmp_path: Path) -> None:
    """`warm run nb.ipynb` (and `warm verify --workload`) says it is a notebook and how to
    export it, in one line, exit 2, no bundle made; a paired `nb.py` beside it is named."""
    notebook = tmp_path / "nb.ipynb"
    notebook.write_text(NOTEBOOK)
    bundle, other = tmp_path / "b.warm", tmp_path / "other.warm"
    (tmp_path / "w.py").write_text("def workload(rt):\n    pass\n")
    assert warm("run", tmp_path / "w.py", "--bundle", other).returncode == 0
    for args in (("run", notebook, "--bundle", bundle), ("verify", other, "--workload", notebook)):
        done = warm(*args)
        assert done.returncode == 2, done.stderr
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert f"{notebook}: a Jupyter notebook: " in done.stderr
        assert f"jupyter nbconvert --to script {notebook}" in done.stderr
        assert "def workload(rt)" in done.stderr
    assert not bundle.exists()
    (tmp_path / "nb.py").write_text("def workload(rt):\n    pass\n")
    done = warm("run", notebook, "--bundle", bundle)
    assert done.returncode == 2 and f"{tmp_path / 'nb.py'} is beside it, name that" in done.stderr
    assert warm("run", tmp_path / "nb.py", "--bundle", bundle).returncode == 0


SCRIPT = """
import numpy as np, warmcli
from warmcli import Kernel
TWICE = Kernel("void twice(float *x, int n) { for (int i = 0; i < n; i++) x[i] *= 2; }",
               "twice", "Pi")
rt = warmcli.runtime("host")
x = rt.upload(np.arange(4, dtype=np.float32))
rt.launch(TWICE, x, 4)
OUT = rt.read(x).tolist()
"""
RERUN = """
import gc, json, os, runpy, sys, threading
import warmcli
from warmcli import Kernel
outs = [runpy.run_path(sys.argv[1], run_name="__main__")["OUT"] for _ in range(30)]
gc.collect()
kernels = sum(isinstance(o, Kernel) for o in gc.get_objects())
report = warmcli.report()
print(json.dumps({"outs": outs, "kernels": kernels, "threads": threading.active_count(),
                  "compiled": len(report.kernels)}))
"""


def test_a_script_run_again_in_one_process_leaves_no_kernel_objects_behind(
    warm: Any, tmp_path: Path
) -> None:
    """A script re-run 30 times in one process (`%run`, `runpy.run_path`) serves its kernel
    from memory each time, computes alike, and keeps only the last run's kernel object alive
    (the launch hit path held every run's before), over a bundle and without one."""
    script = tmp_path / "analysis.py"
    script.write_text(SCRIPT)
    head, body = SCRIPT.split('rt = warmcli.runtime("host")\n')
    body = "".join(f"    {line}\n" for line in body.splitlines()[:-1])  # its launches, no read
    (tmp_path / "w.py").write_text(f"{head}def workload(rt):\n{body}")
    bundle = tmp_path / "b.warm"
    assert warm("run", tmp_path / "w.py", "--bundle", bundle).returncode == 0
    for served, expected in ((bundle, 0), (None, 1)):
        env = dict(warm.env, WARM_BUNDLE=str(served or ""), PYTHONPATH=str(ROOT))
        done = subprocess.run(
            [sys.executable, "-c", RERUN, str(script)], env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)
        assert found["outs"] == [[0.0, 2.0, 4.0, 6.0]] * 30
        assert found["compiled"] == expected and found["threads"] == 1
        assert found["kernels"] <= 2, found  # the last run's (and its module's, not yet freed)
