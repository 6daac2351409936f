"""A PyCUDA user's `SourceModule(...)` arguments, pre-built without a GPU (`warm run --pycuda
--arch sm_90`, real NVRTC, the real CLI in a subprocess, real bundles).

`options=` that is not a list (a generator, a set, a dict), which PyCUDA's `compile` cannot
copy (`options[:]`, a TypeError there): a generator was read empty by warm's check of its
entries and the kernel built without its options (the key of a module with none, its
binary without `-DFACTOR=3.0f`: another result); a set's order, hence the key, changed
with each process's hash seed, so no pre-build was ever served. Now refused in one line.
`include_dirs=` as a generator (PyCUDA's `[*include_dirs, ...]` takes any iterable) was
read empty the same way, so the header was not found: now read once, as a list's.
`code=` beside a real `-arch` (`arch="sm_90"`, or none: PyCUDA passes the device's), which
PyCUDA's nvcc refuses, was built: now refused in one line. `options=None` is PyCUDA's
`DEFAULT_NVCC_FLAGS` as the script left it (the pre-build's stand-in lacked it). On a GPU
(a fake pycuda package: pure dispatch logic), PyCUDA's own modules (`elementwise`, `scan`)
keep PyCUDA's `SourceModule` under the hook. And each parameter that changes the binary
changes the key, those that do not (`keep`, `cache_dir`, `nvcc="nvcc"`, `arch="compute_90",
code="sm_90"`, `arch="sm_90"`, a folder's path) do not.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm

from warmcli.backends.cuda.nvrtc import find_nvrtc

pytestmark = pytest.mark.skipif(find_nvrtc() is None, reason="NVRTC not installed")

WORKLOAD = '''
import os
import numpy as np
import pycuda.autoinit
import pycuda.driver as drv
from pycuda.compiler import SourceModule

HERE = os.path.dirname(os.path.abspath(__file__))
PLAIN = """
__global__ void scale(float *x, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
#ifndef FACTOR
#define FACTOR 2.0f
#endif
    if (i < n) x[i] *= FACTOR;
}
"""
INCL = '#include "scale.h"\\n' + PLAIN
EXTERN_C = PLAIN.replace("__global__", 'extern "C" __global__')
A, B = os.path.join(HERE, "incA"), os.path.join(HERE, "incB")
CASES = {
    "base": lambda: SourceModule(PLAIN),
    "define": lambda: SourceModule(PLAIN, options=["-DFACTOR=3.0f"]),
    "fast": lambda: SourceModule(PLAIN, options=["--use_fast_math"]),
    "inclA": lambda: SourceModule(INCL, include_dirs=[A]),
    "inclB": lambda: SourceModule(INCL, include_dirs=[B]),
    "inclC": lambda: SourceModule(INCL, include_dirs=[os.path.join(HERE, "incC")]),
    "incl_gen": lambda: SourceModule(INCL, include_dirs=(d for d in [B])),
    "no_extern_c": lambda: SourceModule(EXTERN_C, no_extern_c=True),
    "same": lambda: SourceModule(
        PLAIN, nvcc="nvcc", keep=True, arch="compute_90", code="sm_90", cache_dir=False
    ),
    "same_cache": lambda: SourceModule(PLAIN, arch="sm_90", cache_dir=os.path.join(HERE, "c")),
    "code_only": lambda: SourceModule(PLAIN, code="sm_90"),
    "arch_and_code": lambda: SourceModule(PLAIN, arch="sm_90", code="sm_90"),
    "opt_gen": lambda: SourceModule(PLAIN, options=(o for o in ["-DFACTOR=3.0f"])),
    "opt_set": lambda: SourceModule(PLAIN, options={"-DFACTOR=3.0f", "--use_fast_math"}),
    "opt_dict": lambda: SourceModule(PLAIN, options={"-DFACTOR=3.0f": 1}),
}


def default_flags():
    from pycuda.compiler import DEFAULT_NVCC_FLAGS  # PyCUDA's options=None, a list

    if os.environ["CASE"] == "default_define":
        return SourceModule(PLAIN, options=[*DEFAULT_NVCC_FLAGS, "-DFACTOR=3.0f"])
    if not DEFAULT_NVCC_FLAGS:  # (main runs once per pass)
        DEFAULT_NVCC_FLAGS.append("--use_fast_math")  # what every options=None module gets
    return SourceModule(PLAIN)


CASES.update(default_define=default_flags, default_fast=default_flags)


def main():
    mod = CASES[os.environ["CASE"]]()
    x = drv.mem_alloc(1024 * 4)
    mod.get_function("scale")(x, np.int32(1024), block=(256, 1, 1), grid=(4, 1))
'''


@pytest.fixture
def build(warm: Warm, tmp_path: Path, forked: Any):
    """`build(case)`: (exit code, stderr, the bundle's kernel keys) of a pre-build of CASE,
    run in an empty working folder: `w.py` written with CASE its own (not an environment
    variable: each `warm run` a fork of one process that imported the CLI once,
    `tests/forked_cli.py`, whose environment is `warm`'s)."""
    script = tmp_path / "w.py"
    cli = forked(warm)
    for folder, factor in (("incA", 3), ("incB", 5), ("incC", 3)):  # incC: incA's content
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "scale.h").write_text(f"#define FACTOR {factor}.0f\n")
    cwd = tmp_path / "cwd"
    cwd.mkdir()

    def run(case: str) -> tuple[int, str, set[str]]:
        bundle = tmp_path / f"{case}.warm"
        script.write_text(WORKLOAD.replace('os.environ["CASE"]', repr(case)))
        proc = cli("run", script, "--pycuda", "--arch", "sm_90", "-q", "-b", bundle, cwd=cwd)
        keys: set[str] = set()
        if bundle.exists():
            with sqlite3.connect(bundle) as db:
                keys = {row[0] for row in db.execute("SELECT key FROM kernels")}
        return proc.returncode, proc.stderr, keys

    return run


@pytest.mark.parametrize("case", ["opt_gen", "opt_set", "opt_dict"])
def test_options_other_than_a_list_are_refused_in_one_line(build, case: str) -> None:
    code, err, keys = build(case)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "SourceModule(options=" in err and "a list" in err, err
    assert not keys


@pytest.mark.parametrize("case", ["code_only", "arch_and_code"])
def test_code_beside_a_real_arch_is_refused_as_nvcc_refuses_it(build, case: str) -> None:
    """PyCUDA passes `-arch sm_90` (arch=, else the device's) and `-code sm_90`, which nvcc
    refuses ("Value of -arch option ('sm_90') must be a virtual code architecture"): only
    `arch="compute_90", code="sm_90"` builds there. warm built them."""
    code, err, keys = build(case)
    assert code == 2 and not keys, err
    assert len(err.strip().splitlines()) == 1 and "code='sm_90'" in err, err
    assert "must be a virtual code architecture" in err and "arch='compute_90'" in err, err


def test_include_dirs_as_a_generator_is_read_once_as_a_list(build) -> None:
    code, err, from_generator = build("incl_gen")
    assert code == 0, err
    assert from_generator == build("inclB")[2]
    assert from_generator != build("inclA")[2]


def test_pycudas_default_options_are_its_default_nvcc_flags(build) -> None:
    """`pycuda.compiler.DEFAULT_NVCC_FLAGS` (PyCUDA's `options=None`, from
    `PYCUDA_DEFAULT_NVCC_FLAGS`) was not in the pre-build's stand-in (refused)."""
    code, err, keys = build("default_define")
    assert code == 0, err
    assert keys == build("define")[2]
    code, err, keys = build("default_fast")
    assert code == 0, err
    assert keys == build("fast")[2]


def test_what_changes_the_binary_changes_the_key_and_nothing_else(build, tmp_path: Path) -> None:
    keys = {}
    for case in ("base", "define", "fast", "no_extern_c", "inclA", "same", "same_cache", "inclC"):
        code, err, keys[case] = build(case)
        assert code == 0 and len(keys[case]) == 2, (case, err)  # its cubin and its PTX
    assert keys["same"] == keys["same_cache"] == keys["base"]  # keep, cache_dir, arch, nvcc
    assert keys["inclC"] == keys["inclA"]  # another folder holding the same header
    differing = ("base", "define", "fast", "no_extern_c", "inclA")
    assert len(set().union(*(keys[c] for c in differing))) == 2 * len(differing)
    assert not any((tmp_path / "cwd").iterdir())  # keep=True: no build folder left
    assert not (tmp_path / "c").exists()  # cache_dir: nothing written there


# A fake pycuda package (no pycuda here): its compiler's SourceModule records what it got,
# and its elementwise module looks SourceModule up when it compiles, as PyCUDA's
# `get_elwise_module` (and `reduction`, `curandom`) do; `scan` imports it at its import.
FAKE_PYCUDA = {
    "__init__.py": "",
    "compiler.py": "DEFAULT_NVCC_FLAGS = []\nclass SourceModule:\n"
    "    def __init__(self, source, **options):\n        self.source = source\n",
    "elementwise.py": "def get_elwise_module(source):\n"
    "    from pycuda.compiler import SourceModule\n"
    "    return SourceModule(source, no_extern_c=True)\n",
    "scan.py": "from pycuda.compiler import SourceModule\n"
    "def scan_module(source):\n    return SourceModule(source, no_extern_c=True)\n",
}


@pytest.fixture
def fake_pycuda(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import sys

    (tmp_path / "pycuda").mkdir()
    for name, text in FAKE_PYCUDA.items():
        (tmp_path / "pycuda" / name).write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [n for n in sys.modules if n == "pycuda" or n.startswith("pycuda.")]:
        monkeypatch.delitem(sys.modules, name)
    yield
    for name in [n for n in sys.modules if n == "pycuda" or n.startswith("pycuda.")]:
        del sys.modules[name]


def test_on_a_gpu_pycudas_own_modules_keep_pycudas_source_module(fake_pycuda) -> None:
    """`warm run --pycuda` (on a GPU) made `pycuda.compiler.SourceModule` warm's for every
    caller, so PyCUDA's `ElementwiseKernel`, `ReductionKernel`, gpuarray arithmetic and scan
    kernels became warm kernels, where the README says PyCUDA compiles them itself (and
    `ReductionKernel`'s `prepare("PPIN")` was refused: warm has no `N`)."""
    import pycuda.compiler

    from warmcli.pycuda import SourceModule as WarmSourceModule
    from warmcli.pycuda.hook import pycuda_modules

    original = pycuda.compiler.SourceModule
    source = "__global__ void k(float *x) { x[0] = 1; }"
    with pycuda_modules(gpu_less=False):
        import pycuda.elementwise
        import pycuda.scan

        assert isinstance(pycuda.compiler.SourceModule(source), WarmSourceModule)  # the script's
        assert type(pycuda.elementwise.get_elwise_module(source)) is original
        assert type(pycuda.scan.scan_module(source)) is original
    assert pycuda.compiler.SourceModule is original
    assert type(pycuda.scan.scan_module(source)) is original  # imported during the run


def test_on_a_gpu_options_none_are_pycudas_default_nvcc_flags(fake_pycuda) -> None:
    """PyCUDA's `options=None` is its `DEFAULT_NVCC_FLAGS`, a list a script may extend
    (`--use_fast_math`: other results); warm read only `PYCUDA_DEFAULT_NVCC_FLAGS`."""
    import pycuda.compiler

    from warmcli.pycuda.hook import pycuda_modules

    pycuda.compiler.DEFAULT_NVCC_FLAGS.append("--use_fast_math")
    with pycuda_modules(gpu_less=False):
        module = pycuda.compiler.SourceModule("__global__ void k(float *x) { x[0] = 1; }")
    assert module.options == ("--use_fast_math",)
