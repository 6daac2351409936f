"""PyCUDA's `compile` passes its own include folder (`pycuda/cuda`, `_find_pycuda_include_path`)
as the last `-I` of every module, so `#include <pycuda-complex.hpp>` needs no
`include_dirs`. warm gave no such folder: the compile failed with "cannot open source
file". Here a pycuda package on `sys.path` (its `cuda` folder holding a header by one
of PyCUDA's names) is found without importing it, and its kernel compiles with real
NVRTC for sm_90; with no pycuda to be found the module is refused, naming the header.
"""

from __future__ import annotations

import importlib.machinery
from pathlib import Path

import numpy as np
import pytest

from warmcli import ProcessMode, ProcessModeOverride
from warmcli.backends.cuda.arch import ArchDevice
from warmcli.pycuda import PyCudaError, SourceModule, bound_runtime
from warmcli.pycuda.standins import GPUArray
from warmcli.runtime.runtime import Runtime

SOURCE = """#include <pycuda-helpers.hpp>
extern "C" __global__ void k(float *x) { x[0] = warm_trial_twice(x[0]); }
"""


def _compiles(module: SourceModule) -> tuple[int, int]:
    rt = Runtime(ArchDevice("sm_90"), jobs=1)
    with bound_runtime(rt):
        for mode in (ProcessMode.COMPILE_ONLY, ProcessMode.COMPILE_AND_AUTOTUNE):
            with ProcessModeOverride(mode) as collector:
                module.get_function("k")(GPUArray(1, np.float32), block=(1, 1, 1))
    c = collector.reader().compilation
    return c.compiled, c.failed


def test_pycudas_include_folder_is_given_as_pycuda_gives_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "site" / "pycuda" / "cuda"
    folder.mkdir(parents=True)
    (folder.parent / "__init__.py").write_text("raise ImportError('never imported by warm')\n")
    (folder / "pycuda-helpers.hpp").write_text(
        "__device__ inline float warm_trial_twice(float v) { return v + v; }\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    module = SourceModule(SOURCE, no_extern_c=True, include_dirs=["/nonexistent-first"])
    assert module.options == ("-I/nonexistent-first", f"-I{folder}"), "PyCUDA's order: last"
    assert _compiles(module) == (1, 0)
    plain = SourceModule(SOURCE.replace("pycuda-helpers.hpp", "cuda_fp16.h"), no_extern_c=True)
    assert plain.options == (), "only a source including PyCUDA's own headers gets the folder"


def test_without_pycuda_its_header_is_named(tmp_path: Path) -> None:
    if importlib.machinery.PathFinder.find_spec("pycuda") is not None:
        pytest.skip("pycuda is installed here")
    with pytest.raises(PyCudaError, match=r"includes pycuda-helpers\.hpp, PyCUDA's own header"):
        SourceModule(SOURCE, no_extern_c=True)
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "pycuda-helpers.hpp").write_text("__device__ inline float warm_trial_twice(float v);\n")
    assert SourceModule(SOURCE, no_extern_c=True, include_dirs=[str(inc)]).options == (f"-I{inc}",)
