"""A header given by `-include` (nvcc's and NVRTC's `--pre-include`) is read before the
source, so its text is part of what is compiled: the key covers it as it covers an
`#include`d one. It did not: `SourceModule(src, options=["-include", "v.cuh"],
include_dirs=[inc])` warmed, the header edited, and `warm run` stored nothing new (the
bundle served the stale build). Through the real CLI and real NVRTC for sm_90.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.kernel import Kernel, kernel_key

SCRIPT = """
import pycuda.autoinit
import pycuda.driver as drv
from pycuda.compiler import SourceModule

SOURCE = "__global__ void k(int *x) {{ x[threadIdx.x] = VAL; }}"
mod = SourceModule(SOURCE, options={options!r}, include_dirs={dirs!r})

def main():
    mod.get_function("k")(drv.mem_alloc(16), block=(4, 1, 1), grid=(1, 1))
"""


def _stored(warm: Warm, script: Path, bundle: Path) -> str:
    proc = warm("run", script, "--pycuda", "--arch", "sm_90", "-b", bundle, "-q")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()[0]


def test_an_edited_pre_included_header_is_a_new_kernel(warm: Warm, tmp_path: Path) -> None:
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "v.cuh").write_text("#define VAL 5\n")
    script = tmp_path / "pre.py"
    script.write_text(SCRIPT.format(options=["-include", "v.cuh"], dirs=[str(inc)]))
    bundle = tmp_path / "pre.warm"
    assert "stored 2 new kernel(s)" in _stored(warm, script, bundle)
    assert "stored 0 new kernel(s)" in _stored(warm, script, bundle)
    (inc / "v.cuh").write_text("#define VAL 6\n")
    assert "stored 2 new kernel(s)" in _stored(warm, script, bundle), "a stale hit"


@pytest.mark.parametrize(
    "spelling", [("-include", "{p}"), ("--pre-include={p}",), ("-include={p}",)]
)
def test_every_spelling_of_a_pre_include_keys_its_header(tmp_path: Path, spelling) -> None:
    header = tmp_path / "pre.cuh"
    header.write_text("#define VAL 5\n")
    options = tuple(s.format(p=header) for s in spelling)
    k = Kernel(
        "__global__ void k(int *x) { x[0] = VAL; }", "k", "P", language="cuda", options=options
    )
    first = kernel_key(k, "sm_90", "nvcc")
    header.write_text("#define VAL 6\n")
    os.utime(header, ns=(1, 1))  # an older mtime: not a settled file's memo
    assert kernel_key(k, "sm_90", "nvcc") != first
