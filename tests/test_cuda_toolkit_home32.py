"""The CUDA toolkit's headers NVRTC is given, found as nvcc and CuPy find the toolkit: real
NVRTC, compile-only (no GPU).

On the H200's image (PyTorch's NVRTC packages, which hold no CCCL, and a CUDA 13.0 toolkit
in /usr/local/cuda-13.0), a kernel including <cooperative_groups.h> failed to compile by
NVRTC: "cannot open source file cuda/std/type_traits". CUDA 13 keeps CCCL's headers in
the toolkit's `include/cccl`, which nvcc searches by itself and which warm did not give
NVRTC, and with no `CUDA_HOME` warm gave NVRTC no toolkit at all, where nvcc (on `PATH`)
and CuPy take the toolkit above the nvcc on `PATH`, else /usr/local/cuda. A header found
there is keyed, as `CUDA_HOME`'s are."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from warmcli import kernel as kernel_module
from warmcli.backends.batch import compile_batch
from warmcli.backends.compiler import CompileUnit
from warmcli.kernel import Kernel, kernel_key

NVRTC = pytest.importorskip("warmcli.backends.cuda.nvrtc")
if NVRTC.find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
    pytest.skip("NVRTC not installed (cuda-bindings, nvidia-cuda-nvrtc)", allow_module_level=True)

KERNEL = Kernel(
    '#include <warm_cccl_only/v.h>\nextern "C" __global__ void t(float *y) { y[0] = TKV; }\n',
    "t",
    "P",
    language="cuda",
)


def _toolkit(root: Path, value: str) -> Path:
    """A toolkit whose header is only in its CUDA 13 CCCL folder, with a bin/nvcc."""
    header = root / "include" / "cccl" / "warm_cccl_only" / "v.h"
    header.parent.mkdir(parents=True)
    header.write_text(f"#define TKV {value}\n")
    (root / "include" / "cuda_runtime_api.h").write_text("")  # a toolkit's, as nvcc's is
    (root / "bin").mkdir()
    (root / "bin" / "nvcc").write_text("#!/bin/sh\nexit 1\n")
    (root / "bin" / "nvcc").chmod(0o755)
    return root


def _build(value: str | None = None) -> tuple[str, bool]:
    kernel_module._ENV_INCLUDES.clear()  # read once a process: anew
    compiler = NVRTC.NvrtcCompiler(ptx="auto")
    unit = CompileUnit(kernel_key(KERNEL, "sm_90", compiler.toolchain.identity), KERNEL, "sm_90")
    built = compile_batch(compiler, [unit], jobs=1)
    return unit.key, unit.key in built.built


@pytest.fixture()
def no_home(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(kernel_module, "_ENV_INCLUDES", {})
    return monkeypatch


def test_cuda_homes_cccl_folder_is_given_to_nvrtc_and_keyed(
    tmp_path: Path, no_home: pytest.MonkeyPatch
) -> None:
    keys = set()
    for name, value in (("a", "3.0f"), ("b", "5.0f")):
        no_home.setenv("CUDA_HOME", str(_toolkit(tmp_path / name, value)))
        key, built = _build()
        assert built, "NVRTC did not find the header in CUDA_HOME/include/cccl"
        keys.add(key)
    assert len(keys) == 2, "two toolkits' CCCL headers, one key"


def test_without_cuda_home_the_toolkit_above_nvcc_on_path_is_nvrtcs(
    tmp_path: Path, no_home: pytest.MonkeyPatch
) -> None:
    toolkit = _toolkit(tmp_path / "cuda-13.9", "3.0f")
    link = tmp_path / "links"  # a symlink on PATH, as /usr/bin/nvcc: its toolkit is the target's
    link.mkdir()
    (link / "nvcc").symlink_to(toolkit / "bin" / "nvcc")
    no_home.setenv("PATH", f"{link}{os.pathsep}{os.environ.get('PATH', '')}")
    key, built = _build()
    assert built, "NVRTC was given no toolkit where CUDA_HOME is unset and nvcc is on PATH"
    (toolkit / "include" / "cccl" / "warm_cccl_only" / "v.h").write_text("#define TKV 7.0f\n")
    assert _build()[0] != key, "an edited toolkit header kept its key"


def test_an_nvcc_wrapper_outside_a_toolkit_gives_nvrtc_no_system_folder(
    tmp_path: Path, no_home: pytest.MonkeyPatch
) -> None:
    """A wrapper script named nvcc in /usr/local/bin: the folder above it is no toolkit,
    and its include folder (the system's own headers) is never given to NVRTC."""
    from warmcli import headers

    local = tmp_path / "local"
    (local / "bin").mkdir(parents=True)
    (local / "bin" / "nvcc").write_text('#!/bin/sh\nexec /nowhere/nvcc "$@"\n')
    (local / "bin" / "nvcc").chmod(0o755)
    (local / "include" / "warm_cccl_only").mkdir(parents=True)
    (local / "include" / "warm_cccl_only" / "v.h").write_text("#define TKV 1.0f\n")
    no_home.setenv("PATH", f"{local / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    no_home.setattr(headers, "DEFAULT_TOOLKIT", str(tmp_path / "none"))
    assert headers.toolkit_home([None], os.environ["PATH"]) is None
    assert not _build()[1], "NVRTC read /usr/local/include's like headers"
