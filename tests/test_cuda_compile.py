"""The CUDA compile layer with a real nvcc and no GPU: cubins, batching, failures, keys.

Every compile here runs nvcc for real (skipped only when no nvcc can be found);
only the nvcc *lookup* tests point PATH and the package search at empty places.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import nvcc_or_skip

from warmcli.backends.base import Device, DeviceError
from warmcli.backends.batch import compile_batch
from warmcli.backends.compiler import CompiledGroup, CompileFailure, CompileUnit
from warmcli.backends.cuda import nvcc as nvcc_mod
from warmcli.backends.cuda.arch import ArchDevice
from warmcli.backends.cuda.cubin import CubinError, check_cubin, cubin_functions, cubin_sm
from warmcli.backends.cuda.nvcc import ArchError, NvccCompiler, find_nvcc, translation_unit
from warmcli.backends.toolchain import ToolchainError, probe
from warmcli.kernel import Kernel, kernel_key

SAXPY = """\
__device__ float helper(float x) { return x * SCALE; }
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * helper(x[i]) + y[i];
}
"""

TILED = """\
#define TILE {tile}
__device__ float helper(float x) {{ return x + TILE; }}
extern "C" __global__ void {entry}(float* y) {{
    __shared__ float s[TILE];
    s[threadIdx.x % TILE] = helper(y[threadIdx.x]);
    __syncthreads();
    y[threadIdx.x] = s[(threadIdx.x + 1) % TILE];
}}
"""

BROKEN = """\
extern "C" __global__ void broken(float* y) {
    y[threadIdx.x] = 1.0f;
    y[0] = undeclared_thing;
}
"""


@pytest.fixture(scope="module")
def compiler() -> NvccCompiler:
    return NvccCompiler(nvcc_or_skip())


def units_for(
    compiler: NvccCompiler, kernels: list[Kernel], arch: str = "sm_90"
) -> list[CompileUnit]:
    ident = compiler.toolchain.identity
    return [CompileUnit(kernel_key(k, arch, ident), k, arch) for k in kernels]


def saxpys(n: int) -> list[Kernel]:
    return [
        Kernel(SAXPY, "saxpy", "fPPi", language="cuda", defines={"SCALE": i + 1}) for i in range(n)
    ]


@pytest.fixture(scope="module")
def alone(compiler: NvccCompiler) -> dict[str, CompiledGroup]:
    """Each of three saxpys (`saxpys(3)`) for sm_90, and the first for sm_80, built alone
    (a group of one), once for the module: by unit key."""
    units = [*units_for(compiler, saxpys(1), "sm_80"), *units_for(compiler, saxpys(3))]
    return {unit.key: compiler.compile_group([unit]) for unit in units}


@pytest.fixture(scope="module")
def cubins(compiler: NvccCompiler, alone: dict[str, CompiledGroup]) -> dict[str, bytes]:
    """One saxpy cubin per architecture (`alone`'s first saxpy of each), built once for the
    module."""
    return {
        arch: alone[units_for(compiler, saxpys(1), arch)[0].key].binary
        for arch in ("sm_80", "sm_90")
    }


@pytest.mark.parametrize("arch, sm", [("sm_80", 80), ("sm_90", 90)])
def test_cubin_is_an_elf_for_the_requested_arch(cubins: dict[str, bytes], arch: str, sm: int):
    data = cubins[arch]
    assert data[:4] == b"\x7fELF"
    (machine,) = struct.unpack_from("<H", data, 18)
    (flags,) = struct.unpack_from("<I", data, 48)
    assert machine == 190
    assert (flags >> 8) & 0xFF == sm
    assert f"sm_{cubin_sm(data)}" == arch
    check_cubin(data, arch)
    other = "sm_90" if arch == "sm_80" else "sm_80"
    with pytest.raises(CubinError, match=f"for {arch}, not {other}"):
        check_cubin(data, other)


def test_malformed_cubins_are_rejected(cubins: dict[str, bytes]):
    with pytest.raises(CubinError, match="no ELF magic"):
        check_cubin(b"// PTX .version 9.0", "sm_90")
    not_cuda = bytearray(cubins["sm_90"])
    not_cuda[18:20] = struct.pack("<H", 62)  # EM_X86_64
    with pytest.raises(CubinError, match="e_machine is 62"):
        cubin_sm(bytes(not_cuda))
    with pytest.raises(CubinError, match=r"truncated|past the end"):
        cubin_functions(cubins["sm_90"][:200])


def test_one_group_gives_the_same_entries_as_one_by_one(
    compiler: NvccCompiler, alone: dict[str, CompiledGroup]
):
    units = units_for(compiler, saxpys(3))  # (one entry under three defines: one group)
    group = compiler.compile_group(units)
    assert group.symbols == {u.key: u.symbol for u in units}
    assert cubin_functions(group.binary) == set(group.symbols.values())
    for unit in units:  # each built alone (`alone`, the module's)
        one = alone[unit.key]
        assert cubin_functions(one.binary) == {one.symbols[unit.key]}
        assert one.symbols[unit.key] == group.symbols[unit.key]


def test_same_named_helpers_and_conflicting_defines_share_one_group(compiler: NvccCompiler):
    kernels = [
        Kernel(TILED.format(tile=8, entry="tiled"), "tiled", "P", language="cuda"),
        Kernel(TILED.format(tile=16, entry="tiled"), "tiled", "P", language="cuda", name="t16"),
    ]
    units = units_for(compiler, kernels)
    source = translation_unit(units)
    assert len(re.findall(r"^namespace warm_[0-9a-f]{16} \{$", source, re.MULTILINE)) == 2
    group = compiler.compile_group(units)
    assert cubin_functions(group.binary) == {u.symbol for u in units}


def test_sm_90a_builds_and_reads_as_sm_90(compiler: NvccCompiler):
    (unit,) = units_for(compiler, saxpys(1), "sm_90a")
    data = compiler.compile_group([unit]).binary
    assert f"sm_{cubin_sm(data)}" == "sm_90"
    check_cubin(data, "sm_90a")


def test_broken_kernel_is_isolated_with_nvccs_log(compiler: NvccCompiler):
    broken = Kernel(BROKEN, "broken", "P", language="cuda")
    units = units_for(compiler, [*saxpys(4), broken])
    result = compile_batch(compiler, units, jobs=2)
    bad = units[-1].key
    assert set(result.failures) == {bad}
    log = result.failures[bad].log
    assert "undeclared_thing" in log and "broken.cu(3)" in log
    assert set(result.built) == {u.key for u in units[:-1]}
    for unit in units[:-1]:
        assert unit.symbol in cubin_functions(result.built[unit.key].binary)


def test_batch_uses_fewer_processes_than_kernels(compiler: NvccCompiler):
    units = units_for(compiler, saxpys(8))
    result = compile_batch(compiler, units, jobs=2)
    assert not result.failures
    assert len(result.built) == 8
    assert result.processes == 2


def test_entry_without_extern_c_is_a_clear_failure(compiler: NvccCompiler):
    mangled = Kernel(
        SAXPY.replace('extern "C" ', ""), "saxpy", "fPPi", language="cuda", defines={"SCALE": 1}
    )
    with pytest.raises(CompileFailure, match='extern "C"'):
        compiler.compile_group(units_for(compiler, [mangled]))


def test_reserved_option_is_refused(compiler: NvccCompiler):
    k = Kernel(
        SAXPY, "saxpy", "fPPi", language="cuda", options=("-arch=sm_80",), defines={"SCALE": 1}
    )
    with pytest.raises(CompileFailure, match="reserved"):
        compiler.compile_group(units_for(compiler, [k]))


def test_timeout_kills_nvcc(compiler: NvccCompiler):
    with pytest.raises(CompileFailure) as info:
        compiler.compile_group(units_for(compiler, saxpys(1)), timeout=0.01)
    assert info.value.timed_out


def test_arch_strings_are_validated(compiler: NvccCompiler):
    with pytest.raises(ArchError, match="virtual"):
        compiler.check_arch("compute_90")
    with pytest.raises(ArchError, match="not a CUDA architecture"):
        compiler.check_arch("gfx90a")
    assert compiler.check_arch("sm_100") == 100
    if "release 13." in compiler.toolchain.version:
        with pytest.raises(ArchError, match="does not build sm_70"):
            compiler.check_arch("sm_70")


def test_key_follows_toolchain_options_and_arch(compiler: NvccCompiler):
    ident = compiler.toolchain.identity
    assert "release" in compiler.toolchain.version and "Build" in compiler.toolchain.version
    k = saxpys(1)[0]
    base = kernel_key(k, "sm_90", ident)
    other_version = ident.replace(compiler.toolchain.version, "release 99.9, V99.9.0")
    assert kernel_key(k, "sm_90", other_version) != base
    assert kernel_key(k, "sm_80", ident) != base
    fast = Kernel(
        k.source,
        k.entry,
        k.params,
        language="cuda",
        options=("--use_fast_math",),
        defines=dict(k.defines),
    )
    assert kernel_key(fast, "sm_90", ident) != base
    # Two real nvccs of different releases, where this machine has both.
    others = {probe("nvcc", p).version for p in _all_nvccs()}
    if len(others) > 1:
        keys = {kernel_key(k, "sm_90", probe("nvcc", p).identity) for p in _all_nvccs()}
        assert len(keys) == len(_all_nvccs())


def _all_nvccs() -> list[str]:
    return [p for _, p in nvcc_mod._candidates() if p]


def test_arch_device_is_compile_only(cubins: dict[str, bytes], compiler: NvccCompiler):
    dev = ArchDevice("sm_90", nvcc=compiler.path)
    assert isinstance(dev, Device)
    assert (dev.id, dev.backend, dev.can_execute) == ("sm_90", "cuda", False)
    assert dev.fingerprint.identity == "cuda|compile-only|sm_90|none"
    assert dev.compiler("cuda").toolchain == compiler.toolchain
    assert dev.load_module(cubins["sm_90"]) == cubins["sm_90"]
    with pytest.raises(DeviceError, match="sm_80, not sm_90"):
        dev.load_module(cubins["sm_80"])
    buf = dev.allocate((4, 8), "float32")
    assert (buf.shape, buf.dtype, buf.handle) == ((4, 8), "float32", None)
    dev.upload(buf, np.zeros((4, 8), np.float32))
    with pytest.raises(DeviceError, match="has no GPU: compile-only for sm_90"):
        dev.download(buf)
    with pytest.raises(DeviceError, match="has no GPU"):
        dev.time(dev.new_stream(), lambda: None)
    with pytest.raises(DeviceError, match="CUDA kernels only"):
        dev.compiler("c")
    with pytest.raises(ArchError):
        ArchDevice("compute_80")


@pytest.fixture
def empty_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No nvcc anywhere: empty PATH, no CUDA_HOME, no nvidia package."""
    for var in ("WARM_NVCC", "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(nvcc_mod, "_package_roots", lambda: [])
    return tmp_path


def test_nvcc_not_found_is_one_line(empty_world: Path):
    with pytest.raises(ToolchainError) as info:
        find_nvcc()
    message = str(info.value)
    assert "\n" not in message
    assert "pip install 'warmcli[nvcc]'" in message and "WARM_NVCC" in message
    with pytest.raises(ToolchainError, match="--nvcc"):
        find_nvcc(str(empty_world / "nope" / "nvcc"))


def _fake_nvcc(folder: Path) -> str:
    folder.mkdir(parents=True)
    path = folder / "nvcc"
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return str(path)


def test_nvcc_lookup_order(empty_world: Path, monkeypatch: pytest.MonkeyPatch):
    package = _fake_nvcc(empty_world / "site" / "nvidia" / "cu13" / "bin")
    monkeypatch.setattr(nvcc_mod, "_package_roots", lambda: [empty_world / "site" / "nvidia"])
    assert find_nvcc() == package
    on_path = _fake_nvcc(empty_world / "path")
    monkeypatch.setenv("PATH", str(empty_world / "path"))
    assert find_nvcc() == on_path
    home = _fake_nvcc(empty_world / "cuda" / "bin")
    monkeypatch.setenv("CUDA_HOME", str(empty_world / "cuda"))
    assert find_nvcc() == home
    env = _fake_nvcc(empty_world / "env")
    monkeypatch.setenv("WARM_NVCC", env)
    assert find_nvcc() == env
    assert find_nvcc(package) == package


def test_cuda_modules_import_without_pycuda():
    code = (
        "import sys, warmcli.backends.cuda.device, warmcli.backends.cuda.arch;"
        "import warmcli.backends.cuda.nvcc;"
        "assert 'pycuda' not in sys.modules and 'pycuda.driver' not in sys.modules;"
        "from warmcli.backends.cuda.device import list_cuda_devices;"
        "print(type(list_cuda_devices()).__name__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=os.environ,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == "list"
