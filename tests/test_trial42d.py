"""Stop 42's interactive-user trial: a notebook given to `warm run`, and a script re-run in one
long-lived process (`%run`, `runpy.run_path`), as a researcher works in IPython or Jupyter."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import Warm

NOTEBOOK = '{"cells": [{"cell_type": "code", "source": ["%timeit 1\\n"]}], "nbformat": 4}\n'


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    return forked(warm)


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
