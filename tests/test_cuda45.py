"""A CUDA kernel's key searches headers where its compiler does (real NVRTC and nvcc,
compile-only: no GPU).

NVRTC reads the toolkit packages' folders, then `CUDA_HOME`'s, before a kernel's `-I` ones:
a header the packages hold is theirs (NVRTC's identity), whatever a `-I` folder holds.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from warmcli import kernel as kernel_module
from warmcli.backends.batch import compile_batch
from warmcli.backends.compiler import CompileUnit
from warmcli.kernel import Kernel, kernel_key

NVRTC = pytest.importorskip("warmcli.backends.cuda.nvrtc")
if NVRTC.find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
    pytest.skip("NVRTC not installed (cuda-bindings, nvidia-cuda-nvrtc)", allow_module_level=True)

HALF = '#include <cuda_fp16.h>\nextern "C" __global__ void h(__half *x) { x[0] = 1; }\n'
CLEARED = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "CUDA_HOME", "CUDA_PATH")


def _build(compiler, kernel: Kernel) -> tuple[str, object]:
    unit = CompileUnit(kernel_key(kernel, "sm_90", compiler.toolchain.identity), kernel, "sm_90")
    return unit.key, compile_batch(compiler, [unit], jobs=1)


@pytest.fixture()
def clean(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in CLEARED:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(kernel_module, "_ENV_INCLUDES", {})
    return monkeypatch


def test_a_header_the_nvrtc_packages_hold_is_theirs_whatever_an_include_folder_holds(
    tmp_path: Path, clean: pytest.MonkeyPatch
) -> None:
    """Before: the key took the `-I` folder's `cuda_fp16.h` (searched first by the key, last
    by NVRTC), so an edit there changed the key of a build that never read it."""
    (tmp_path / "cuda_fp16.h").write_text("#error not this one\n")
    kernel = Kernel(HALF, "h", "P", language="cuda", options=(f"-I{tmp_path}",))
    compiler = NVRTC.NvrtcCompiler(ptx="auto")
    key, built = _build(compiler, kernel)
    assert key in built.built, "NVRTC read the packages' cuda_fp16.h"
    (tmp_path / "cuda_fp16.h").write_text("#error still not this one\n")
    assert _build(compiler, kernel)[0] == key, "an edit NVRTC never reads: one kernel"
