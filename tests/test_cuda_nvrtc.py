"""NVRTC in process, the compiler choice, and PTX kept for newer GPUs: all real, no GPU.

Every compile runs the real NVRTC from `cuda-bindings` and `nvidia-cuda-nvrtc`
(installed by `make install`; the module skips where they are not), and the CLI
runs in a subprocess. The PTX checks use PTX that NVRTC wrote; only its header
line is edited to stand for a toolkit newer than the driver.
"""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path

import pytest
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.base import DeviceError
from warmcli.backends.batch import compile_batch
from warmcli.backends.compiler import CompileFailure, CompileUnit
from warmcli.backends.cuda import nvrtc as nvrtc_module
from warmcli.backends.cuda.arch import ArchDevice, require_loadable
from warmcli.backends.cuda.choose import choose
from warmcli.backends.cuda.cubin import EM_CUDA, cubin_functions
from warmcli.backends.cuda.nvrtc import NvrtcCompiler, find_nvrtc
from warmcli.backends.cuda.ptx import PtxError, check_ptx, cuda_for_isa, ptx_header
from warmcli.backends.toolchain import ToolchainError
from warmcli.bundle.store import Bundle
from warmcli.errors import ArchError
from warmcli.execution.process_mode import ProcessMode, ProcessModeOverride
from warmcli.kernel import Kernel, kernel_key
from warmcli.runtime import built as built_module
from warmcli.runtime.kernel_cache import KernelCache
from warmcli.runtime.runtime import Runtime

if find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
    pytest.skip("NVRTC not installed (cuda-bindings, nvidia-cuda-nvrtc)", allow_module_level=True)

SOURCE = """\
__device__ float helper(float x) { return x * SCALE; }
extern "C" __global__ void scale(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = helper(y[i]) + 1.0f;
}
"""
OTHER = 'extern "C" __global__ void other(float* y) { y[threadIdx.x] = 2.0f; }\n'
BROKEN = """\
extern "C" __global__ void broken(float* y) {
    y[threadIdx.x] = 1.0f;
    y[0] = undeclared_thing;
}
"""
WORKLOAD = """\
from warmcli import Kernel
DEVICE = "cuda"
SOURCE = {source!r}
KERNELS = [Kernel(SOURCE, "scale", "Pi", language="cuda", defines={{"SCALE": s}}) for s in (2, 3)]

def workload(rt):
    y = rt.buffer(256)
    for k in KERNELS:
        rt.launch(k, y, 256, grid=1, block=256)
"""


@pytest.fixture(scope="module")
def nvrtc() -> NvrtcCompiler:
    return NvrtcCompiler(ptx="auto")


def kernels(n: int) -> list[Kernel]:
    out = [
        Kernel(SOURCE, "scale", "Pi", language="cuda", defines={"SCALE": i + 1}) for i in range(n)
    ]
    return [*out, Kernel(OTHER, "other", "P", language="cuda")]


def units(compiler: NvrtcCompiler, ks: list[Kernel], arch: str) -> list[CompileUnit]:
    identity = compiler.toolchain.identity
    return [CompileUnit(kernel_key(k, arch, identity), k, arch) for k in ks]


def elf_machine_and_sm(cubin: bytes) -> tuple[int, int]:
    """e_machine and the SM in bits 8-15 of e_flags, read straight from the ELF header."""
    assert cubin[:4] == b"\x7fELF"
    (machine,) = struct.unpack_from("<H", cubin, 18)
    (flags,) = struct.unpack_from("<I", cubin, 48)
    return machine, (flags >> 8) & 0xFF


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_one_program_holds_every_entry_for_each_arch(nvrtc: NvrtcCompiler, arch: str) -> None:
    group = units(nvrtc, kernels(4), arch)
    built = nvrtc.compile_group(group)
    assert elf_machine_and_sm(built.binary) == (EM_CUDA, int(arch[3:]))
    assert {u.symbol for u in group} <= cubin_functions(built.binary)
    assert built.ptx_arch == f"compute_{arch[3:]}"
    isa, target, suffix = ptx_header(built.ptx)
    assert target == int(arch[3:]) and suffix == "" and isa >= (9, 0)
    assert all(u.symbol.encode() in built.ptx for u in group)


def test_a_clean_compile_leaves_the_interpreters_shared_bytes_alone(nvrtc: NvrtcCompiler) -> None:
    """A clean compile's log is one NUL byte: NVRTC writes it into a fresh buffer, never
    into `b" " * 1`, which is the interpreter's shared one-byte object (writing it once made
    every later `print` separate with NUL and `os.stat(" ")` fail, process-wide)."""
    built = nvrtc.compile_group(
        units(nvrtc, [Kernel(OTHER, "other", "P", language="cuda")], "sm_90")
    )
    assert built.binary[:4] == b"\x7fELF"
    assert b" "[0] == 32 and os.fsencode(" ").hex() == "20"
    with pytest.raises(FileNotFoundError):
        os.stat(" ")


def test_toolchain_names_nvrtc_and_its_version(nvrtc: NvrtcCompiler) -> None:
    toolchain = nvrtc.toolchain
    assert toolchain.name == "nvrtc" and toolchain.path.endswith(tuple([".so.12", ".so.13"]))
    assert toolchain.version.startswith("NVRTC release 1"), toolchain.version
    assert toolchain.identity.startswith("nvrtc:NVRTC release")


def test_the_version_probe_reads_the_same_banner_with_or_without_minimal(
    nvrtc: NvrtcCompiler, monkeypatch: pytest.MonkeyPatch
) -> None:
    quick = nvrtc_module._read_version("nvrtc", nvrtc.path)
    assert quick == nvrtc.toolchain.version
    # An NVRTC that refuses the first option set (as one older than 12.4 refuses
    # `-minimal`) is asked again without it and reads the same release and build.
    arch = nvrtc_module._VERSION_OPTIONS[-1]
    monkeypatch.setattr(nvrtc_module, "_VERSION_OPTIONS", ((*arch, "-no-such-option"), arch))
    assert nvrtc_module._read_version("nvrtc", nvrtc.path) == quick
    monkeypatch.setattr(nvrtc_module, "_VERSION_OPTIONS", ((*arch, "-no-such-option"),))
    with pytest.raises(ToolchainError, match="cannot compile an empty kernel"):
        nvrtc_module._read_version("nvrtc", nvrtc.path)


def test_a_batch_in_threads_keeps_the_good_kernels_and_shows_the_log(
    nvrtc: NvrtcCompiler,
) -> None:
    bad = Kernel(BROKEN, "broken", "P", language="cuda")
    group = units(nvrtc, [*kernels(5), bad], "sm_90")
    result = compile_batch(nvrtc, group, jobs=2)
    assert set(result.built) == {u.key for u in group[:-1]}
    failure = result.failures[group[-1].key]
    assert "broken.cu(3)" in failure.log and "undeclared_thing" in failure.log


def test_each_groups_source_is_built_in_the_thread_that_compiles_it(
    nvrtc: NvrtcCompiler, monkeypatch: pytest.MonkeyPatch
) -> None:
    built_in: list[str] = []
    real = nvrtc_module.translation_unit

    def translation_unit(group: list[CompileUnit]) -> str:
        built_in.append(threading.current_thread().name)
        return real(group)

    monkeypatch.setattr(nvrtc_module, "translation_unit", translation_unit)
    result = compile_batch(nvrtc, units(nvrtc, kernels(3), "sm_90"), jobs=2)
    assert len(result.groups) == 2 and built_in == ["warm-nvrtc", "warm-nvrtc"]
    with pytest.raises(ArchError, match="does not build sm_50"):  # its checks there too
        nvrtc.compile_group(units(nvrtc, kernels(1), "sm_50"), timeout=60)


def test_each_groups_records_are_made_in_the_thread_that_compiled_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Keeping a group's kernels (records, the PTX's keys) runs beside the other groups'
    compiles, not after the whole batch in the caller's thread; filed in queue order."""
    made_in: list[str] = []
    real = built_module.key_components  # (where a built group's records are made)

    def key_components(*args: object) -> dict[str, str]:
        made_in.append(threading.current_thread().name)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(built_module, "key_components", key_components)
    cache = KernelCache(ArchDevice("sm_90", compiler="nvrtc", ptx="auto"), jobs=2)
    ks = kernels(3)
    with ProcessModeOverride(ProcessMode.COMPILE_ONLY):
        for k in ks:
            cache.queue(k)
        cache.flush()
    assert len(made_in) == 2 * len(ks) and all(n.startswith("warm-compile") for n in made_in)
    records = [record for record, _ in cache.unpersisted()]
    assert [r.arch for r in records] == ["sm_90", "compute_90"] * len(ks)
    assert [r.key for r in records[::2]] == [cache.key(k) for k in ks]
    assert [r.entry for r in records[1::2]] == [k.entry for k in ks]


def test_an_arch_nvrtc_does_not_build_is_one_line(warm, workload_file) -> None:
    proc = warm("run", workload_file(WORKLOAD.format(source=SOURCE)), "--arch", "sm_50")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "does not build sm_50; it builds sm_75" in proc.stderr, proc.stderr


def test_a_compile_past_its_timeout_is_abandoned_with_a_clear_failure(
    nvrtc: NvrtcCompiler,
) -> None:
    before = threading.active_count()
    with pytest.raises(CompileFailure) as caught:
        nvrtc.compile_group(units(nvrtc, kernels(8), "sm_90"), timeout=0.001)
    assert caught.value.timed_out and "within 0.001 s" in caught.value.log
    assert threading.active_count() <= before + 1


def test_the_choice_and_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WARM_CUDA_COMPILER", raising=False)
    monkeypatch.delenv("WARM_NVCC", raising=False)
    assert choose().name == "nvrtc" and "installed" in choose().why
    assert choose("nvcc").name == "nvcc" and choose("nvcc").why == "--compiler nvcc"
    assert choose(nvcc="/x/nvcc").name == "nvcc"
    monkeypatch.setenv("WARM_CUDA_COMPILER", "nvcc")
    assert choose().why == "WARM_CUDA_COMPILER nvcc"
    assert choose("nvrtc").name == "nvrtc"


def test_ptx_refused_when_newer_than_the_driver_or_the_gpu(nvrtc: NvrtcCompiler) -> None:
    ptx = nvrtc.compile_group(units(nvrtc, kernels(1), "sm_90")).ptx
    isa, _, _ = ptx_header(ptx)
    check_ptx(ptx, "sm_100", "13.5")  # a newer GPU, a driver that knows this ISA
    check_ptx(ptx, "sm_100", "none")  # no driver here: cannot say, not refused
    major, minor = cuda_for_isa(isa)
    old = f"{major}.{minor - 1}" if minor else f"{major - 1}.9"  # the CUDA just before it
    with pytest.raises(PtxError, match="CUDA_ERROR_UNSUPPORTED_PTX_VERSION"):
        check_ptx(ptx, "sm_100", old)
    with pytest.raises(PtxError, match="newer than sm_80"):
        check_ptx(ptx, "sm_80", "13.5")
    with pytest.raises(DeviceError, match="cannot load this PTX"):
        require_loadable("cuda:0", ptx, "sm_90", "12.8")
    arch_specific = ptx.replace(b".target sm_90", b".target sm_90a", 1)
    with pytest.raises(PtxError, match="sm_90 only"):
        check_ptx(arch_specific, "sm_100", "13.5")
    assert cuda_for_isa((8, 7)) == (12, 8) and cuda_for_isa((7, 8)) == (11, 8)


def test_a_newer_gpu_is_served_the_ptx_and_compiles_nothing(tmp_path: Path) -> None:
    """Warm for sm_80 (cubins + compute_80 PTX), serve a compile-only sm_90 device."""
    path = tmp_path / "b.warm"
    ks = kernels(2)
    builder = ArchDevice("sm_80", ptx="auto")
    with Bundle.open(path, write=True) as bundle:
        rt = Runtime(builder, bundle, misses=None)
        with ProcessModeOverride(ProcessMode.COMPILE_ONLY):
            for k in ks:
                rt.kernels.queue(k)
            rt.kernels.flush()
        rt.persist(bundle)
        archs = sorted({r.arch for r in bundle.kernels()})
    assert archs == ["compute_80", "sm_80"]
    with Bundle.open(path) as bundle, ProcessModeOverride(ProcessMode.EXECUTE) as collector:
        rt = Runtime(ArchDevice("sm_90"), bundle)
        for k in ks:
            rt.kernels.get(k)
    stats = collector.reader().compilation
    assert (stats.compiled, stats.loaded, stats.ptx_jit) == (0, len(ks), len(ks))
    assert any("served by PTX JIT (compute_80 on sm_90)" in n for n in collector.reader().notes())
    # A serving machine with no compiler at all is served the PTX too.
    with Bundle.open(path) as bundle, ProcessModeOverride(ProcessMode.EXECUTE) as collector:
        rt = Runtime(ArchDevice("sm_90", nvcc="/nonexistent/nvcc"), bundle)
        for k in ks:
            rt.kernels.get(k)
    assert collector.reader().compilation.ptx_jit == len(ks)


def test_cli_check_reports_ptx_serving_and_no_ptx_leaves_it_out(
    warm, workload_file, tmp_path: Path
) -> None:
    workload = workload_file(WORKLOAD.format(source=SOURCE))
    with_ptx, without = tmp_path / "ptx.warm", tmp_path / "cubins.warm"
    for path, extra in ((with_ptx, ()), (without, ("--no-ptx",))):
        proc = warm("run", workload, "--arch", "sm_80", "--bundle", path, "-q", *extra)
        assert proc.returncode == 0, proc.stderr
    doc = warm.json("check", with_ptx, "--arch", "sm_90")
    assert doc["servable"] is True and doc["kernels"] == 2, doc
    assert {m["reason"] for m in doc["ptx_jit"]} == {"ptx"}
    assert "compute_80" in doc["ptx_jit"][0]["detail"]
    shown = warm("check", with_ptx, "--arch", "sm_90")
    assert shown.returncode == 0 and "served by PTX JIT" in shown.stdout
    refused = warm("check", without, "--arch", "sm_90", "--json")
    assert refused.returncode == 1 and '"ptx_jit": []' in refused.stdout
    older = warm("check", with_ptx, "--arch", "sm_75", "--json")
    assert older.returncode == 1, "PTX for compute_80 is no use to an sm_75 GPU"


def test_cli_compile_error_shows_nvrtc_log_with_file_and_line(warm, workload_file) -> None:
    broken = WORKLOAD.format(source=BROKEN).replace('"scale", "Pi"', '"broken", "P"')
    broken = broken.replace("rt.launch(k, y, 256, grid=1, block=256)", "rt.launch(k, y)")
    proc = warm("run", workload_file(broken), "--arch", "sm_90", "--compiler", "nvrtc")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "broken.cu(3)" in proc.stderr and "undeclared_thing" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_cli_nvcc_still_works_when_selected_and_says_so(
    warm, workload_file, tmp_path: Path
) -> None:
    workload = workload_file(WORKLOAD.format(source=SOURCE))
    bundle = tmp_path / "nvcc.warm"
    proc = warm("run", workload, "--arch", "sm_90", "--compiler", "nvcc", "-b", bundle, "-v")
    if proc.returncode == 2 and "nvcc not found" in proc.stderr:  # pragma: no cover
        pytest.skip(proc.stderr)
    assert proc.returncode == 0, proc.stderr
    assert "compiler: sm_90: nvcc " in proc.stdout and "--compiler nvcc" in proc.stdout
    assert "--cubin -arch=sm_90 --keep" in proc.stdout
    kernels = warm.json("stats", bundle)["kernels"]
    assert {k["arch"] for k in kernels} == {"sm_90", "compute_90"}
    default = warm.json("run", workload, "--arch", "sm_90", "-b", tmp_path / "d.warm")
    assert default["compilers"][0]["compiler"] == "nvrtc"
    bad = warm("run", workload, "--arch", "sm_90", "--compiler", "clang", "-b", bundle)
    assert bad.returncode == 2 and "not a CUDA compiler" in bad.stderr
    bad_ptx = warm("run", workload, "--arch", "sm_90", "--ptx", "sm_90", "-b", bundle)
    assert bad_ptx.returncode == 2 and "compute_XX" in bad_ptx.stderr
    listed = warm("devices")
    assert "compiler: cuda: nvrtc" in listed.stdout and "preferred" in listed.stdout


def test_a_named_compute_arch_gets_its_own_ptx(nvrtc: NvrtcCompiler) -> None:
    named = NvrtcCompiler(ptx="compute_80")
    built = named.compile_group(units(named, kernels(2), "sm_90"))
    assert elf_machine_and_sm(built.binary) == (EM_CUDA, 90)
    assert built.ptx_arch == "compute_80" and ptx_header(built.ptx)[1] == 80
    check_ptx(built.ptx, "sm_86", "13.5")  # an sm_86 GPU can JIT it, though no cubin fits
