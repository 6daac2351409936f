"""The README, claim by claim, against the real tool: where they disagreed, the code.

Real `warm run` in a subprocess with the real cc and real SQLite files. README ("Commands",
run): "an empty file (as `mktemp` makes) is a new bundle; a first run that fails before
storing anything leaves neither the bundle nor its `.lock` behind". Given an empty file, a
failed first run left it an empty 270 KiB bundle with a `.lock` beside it (a later
`warm stats` of it no longer said it is empty); it now leaves the file empty, as it was
given, and no lock.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

FAILS = {  # a workload that raises, and one that ends the process itself
    "raises": 'DEVICE = "host"\ndef workload(rt):\n    raise RuntimeError("boom")\n',
    "os_exit": 'import os\nDEVICE = "host"\ndef workload(rt):\n    os._exit(0)\n',
}


@pytest.mark.parametrize("how", sorted(FAILS))
def test_a_failed_first_run_leaves_an_empty_file_empty_and_no_lock(
    warm: Warm, tmp_path: Path, how: str
) -> None:
    workload = tmp_path / "w.py"
    workload.write_text(FAILS[how])
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(b"")  # as mktemp makes it
    done = warm("run", workload, "-b", bundle, "-q")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert bundle.exists() and bundle.stat().st_size == 0
    assert not Path(f"{bundle}.lock").exists()
    again = warm("stats", bundle)  # still the empty file the user made
    assert again.returncode == 2 and "an empty file" in again.stderr, again.stderr


def test_a_run_into_an_empty_file_that_stores_keeps_its_bundle(warm: Warm, tmp_path: Path) -> None:
    workload = tmp_path / "w.py"
    workload.write_text(
        "from warmcli import Kernel\n"
        'DEVICE = "host"\n'
        'K = Kernel("void k(float *x) { x[0] = 1; }", "k", "P")\n'
        "def workload(rt):\n"
        "    rt.launch(K, rt.buffer(1))\n"
    )
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(b"")
    done = warm("run", workload, "-b", bundle, "-q")
    assert done.returncode == 0, done.stderr
    assert bundle.stat().st_size > 0
    assert warm("stats", bundle).returncode == 0


TUNES = r"""
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
SRC = "void k(float *x, int n) { for (int i = 0; i < n; i++) x[i] = V; }"
def launch(rt, k, x, n, *, stream=None):
    rt.launch(k, x, n, stream=stream)
T = Tunable("t", {f"c{v}": Kernel(SRC, "k", "Pi", defines={"V": v}) for v in (1, 2)}, launch)
def workload(rt):
    rt.tune(T, rt.upload(np.zeros(4, np.float32)), 4)
"""


@pytest.mark.parametrize("name", ["statistics", "decimal"])
def test_a_workload_named_as_a_stdlib_module_warm_tuning_imports_tunes(
    warm: Warm, tmp_path: Path, name: str
) -> None:
    """README (The workload contract): the workload's folder comes first on `sys.path`, as
    under Python, and a `statistics.py` workload is named as one warm runs. warm's tuning
    imported `statistics` (which imports `decimal`) on its first measurement, after that
    folder was put first: a tuning workload named `statistics.py` or `decimal.py` failed
    (`ImportError: cannot import name 'median' from 'statistics'`, exit 2), blamed on its
    `rt.tune` line. A median needs no module."""
    folder = tmp_path / "app"
    folder.mkdir()
    workload = folder / f"{name}.py"
    workload.write_text(TUNES)
    bundle = tmp_path / "b.warm"
    done = warm("run", workload, "-b", bundle, "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    tunes = warm("stats", bundle, "--json", cwd=tmp_path)
    assert tunes.returncode == 0, tunes.stderr
    assert '"status": "ok"' in tunes.stdout
