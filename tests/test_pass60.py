"""Stop 60's cuts of `warm run`'s own cost (issue 16), held to the behaviour they keep.

A workload that names no `DEVICE` runs on `auto`: every CUDA device where one is present, else
the host. Where no `pycuda` can be imported, no CUDA device can be, and `cuda_available` says so
without importing warm's CUDA backend (`warmcli.backends.cuda.device`, `choose`, `nvrtc`, `nvcc`,
`arch`, ...: ~10 ms of a run's worker, and of a production process's first runtime, that found
nothing: `opening.pycuda_installed`, the inventory's own test moved there). With `pycuda`
importable (a GPU machine), or one imported already, it is asked as before.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import pytest
from conftest import ROOT

NO_PYCUDA = importlib.util.find_spec("pycuda") is None
needs_no_pycuda = pytest.mark.skipif(not NO_PYCUDA, reason="pycuda is importable here")

CUDA_BACKEND = "warmcli.backends.cuda."  # the package's own `__init__` imports nothing
SHALLOW = ("warmcli.backends.cuda.profile",)  # (a host compile's environment reads it)

AUTO = """
import sys
from pathlib import Path

import numpy as np

from warmcli import Kernel

K = Kernel("void k(float *x, int n) {{ for (int i = 0; i < n; i++) x[i] += 1.0f; }}", "k", "Pi")


def workload(rt):
    x = rt.upload(np.zeros(4, dtype=np.float32))
    rt.launch(K, x, 4)
    rt.synchronize()
    cuda = sorted(m for m in sys.modules if m.startswith({prefix!r}) and m not in {shallow!r})
    Path({marks!r}).write_text(repr((rt.device.id, cuda)))
"""


@needs_no_pycuda
def test_an_auto_run_without_pycuda_imports_no_cuda_backend(warm, tmp_path):
    """The real CLI: a workload with no DEVICE, where no pycuda is installed, runs on the host
    (as before) and its worker imported none of warm's CUDA device modules by the time its
    passes ran (before: `cuda_available` imported `cuda.device`, `choose`, `arch`, `nvrtc`,
    `nvcc`, `cubin`, `ptx`... to find `pycuda` missing)."""
    marks = tmp_path / "marks.txt"
    workload = tmp_path / "auto.py"
    workload.write_text(AUTO.format(prefix=CUDA_BACKEND, shallow=SHALLOW, marks=str(marks)))
    done = warm("run", workload, "--bundle", tmp_path / "auto.warm", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["devices"] == ["host"]
    assert marks.read_text() == repr(("host", [])), marks.read_text()


def _available(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@needs_no_pycuda
def test_cuda_available_without_pycuda_is_false_and_imports_no_backend():
    """`cuda_available()` is False where pycuda is missing, as before, with no CUDA module of
    warm's imported (before: seven of them)."""
    code = (
        "import sys; from warmcli.backends.opening import cuda_available; "
        "print(cuda_available(), sorted(m for m in sys.modules "
        f"if m.startswith({CUDA_BACKEND!r}) and m not in {SHALLOW!r}))"
    )
    assert _available(code) == "False []"


def test_cuda_available_asks_the_import_where_a_pycuda_is_found(tmp_path):
    """A `pycuda` that a finder finds is imported, as before: one whose driver fails to load
    (here, a `pycuda.driver` that raises ImportError) finds no device, after warm's CUDA
    backend was imported to ask it."""
    package = tmp_path / "pycuda"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "driver.py").write_text("raise ImportError('libcuda.so.1: cannot open')\n")
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r}); "
        "from warmcli.backends.opening import cuda_available; "
        "print(cuda_available(), 'warmcli.backends.cuda.device' in sys.modules)"
    )
    assert _available(code) == "False True"


def test_cuda_available_with_pycuda_already_imported_asks_it(tmp_path):
    """A `pycuda` already in `sys.modules` (a stand-in, or one imported before) is asked, not
    looked for again (a module with no spec: `find_spec` would raise)."""
    code = (
        "import sys, types; sys.modules['pycuda'] = types.ModuleType('pycuda'); "
        "from warmcli.backends.opening import cuda_available; "
        "print(cuda_available(), 'warmcli.backends.cuda.device' in sys.modules)"
    )
    assert _available(code) == "False True"
