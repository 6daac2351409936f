"""Stop 60's cuts of `warm run`'s own cost (issue 16), held to the behaviour they keep.

A workload that names no `DEVICE` runs on `auto`: every CUDA device where one is present, else
the host. Where no `pycuda` can be imported, no CUDA device can be, and `cuda_available` says so
without importing warm's CUDA backend (`warmcli.backends.cuda.device`, `choose`, `nvrtc`, `nvcc`,
`arch`, ...: ~10 ms of a run's worker, and of a production process's first runtime, that found
nothing: `opening.pycuda_installed`, the inventory's own test moved there). With `pycuda`
importable (a GPU machine), or one imported already, it is asked as before.

The shadowed-module check (`warmcli.warming.shadowed`) of a workload whose folder holds no
other module (no `*.py`, no package) warns of nothing whatever its modules use: it looks at
none of the run's ~400 modules then (~2-4 ms of every run's worker).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import types
from pathlib import Path

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


# `warmcli.warming.shadowed`: a workload alone in its folder (no other module there) looks
# at none of the run's modules; one beside a module or a package warns as before.

USES_COPY = "import copy\n\n\ndef workload(rt):\n    return copy.copy(rt)\n"


def _looked_at(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str]) -> int:
    """How many modules `shadowed` looked at for a workload in a folder of `files`."""
    from warmcli.warming import shadowed as shadowed_module

    folder = tmp_path / "work"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    looked: list[object] = []
    real = shadowed_module._folder

    def counted(module: object, *args: object) -> Path | None:
        looked.append(module)
        return real(module, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(shadowed_module, "_folder", counted)
    assert shadowed_module.shadowed(folder / "workload.py") == []
    return len(looked)


def test_a_workload_alone_in_its_folder_looks_at_no_module(tmp_path, monkeypatch):
    """Beside it only files no import finds (a bundle, data, a folder without
    `__init__.py`): no module of the run's ~400 is looked at (before: every one was)."""
    files = {"workload.py": USES_COPY, "run.warm": "", "data/x.txt": "", "notes.md": ""}
    assert _looked_at(tmp_path, monkeypatch, files) == 0


@pytest.mark.parametrize("beside", ["helper.py", "Helper.PY", "pkg/__init__.py"])
def test_a_workload_beside_a_module_looks_as_before(tmp_path, monkeypatch, beside):
    """A module beside it (in any case) or a package: the modules are looked at, as before."""
    files = {"workload.py": USES_COPY, beside: ""}
    assert _looked_at(tmp_path, monkeypatch, files) > 0


@pytest.mark.parametrize("beside", ["copy.py", "copy/__init__.py"])
def test_a_module_or_package_beside_the_workload_is_still_warned_of(tmp_path, beside):
    """`copy.py` (or a `copy` package) beside a workload that imports copy: warned of."""
    from warmcli.warming.shadowed import shadowed

    folder = tmp_path / "work"
    (folder / beside).parent.mkdir(parents=True, exist_ok=True)
    (folder / beside).write_text("X = 1\n")
    workload = folder / "workload.py"
    workload.write_text(USES_COPY)
    module = types.ModuleType("p60_workload")
    module.__file__ = str(workload)
    exec(compile(USES_COPY, str(workload), "exec"), module.__dict__)
    sys.modules["p60_workload"] = module
    try:
        lines = shadowed(workload)
    finally:
        del sys.modules["p60_workload"]
    assert [line for line in lines if line.startswith(f"{beside} beside the workload")], lines
