"""No input outside a CUDA kernel's key changes the binary built for it: real NVRTC and
nvcc, compile-only (no GPU).

A header in the working folder that NVRTC would find by itself (it looks in the
program's own folder for a quoted name) or only in `CUDA_HOME`'s include folder, options
nvcc takes from its environment (`NVCC_PREPEND_FLAGS`, `NVCC_APPEND_FLAGS`), and
PyCUDA's `-DNDEBUG` or a `-D` a pre-included header reads (made a `#define` after the
headers read it) each changed what was built while the key stayed the same, so a bundle
could serve a binary this process would not build; so did a header included by its
absolute path, one only `__has_include` asks for, and nvcc's `--options-file`. An
`sm_90a` build kept `sm_90a` PTX under the `compute_90` PTX's key, and options that make
a compiler write no cubin (`--keep-dir`, `--dryrun`, `-dlto`) raised from the batch.
So did a `CUDA_HOME` header shadowing an `-I` folder's for NVRTC (the key searched the
`-I` folder first), a header nvcc's gcc finds through `CPATH` or `CPLUS_INCLUDE_PATH`, and
the host compiler nvcc finds on `PATH` (since warm 45, `tests/test_cuda45.py`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import kernel as kernel_module
from warmcli.backends.batch import compile_batch
from warmcli.backends.compiler import CompileUnit
from warmcli.kernel import Kernel, kernel_key

NVRTC = pytest.importorskip("warmcli.backends.cuda.nvrtc")
if NVRTC.find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
    pytest.skip("NVRTC not installed (cuda-bindings, nvidia-cuda-nvrtc)", allow_module_level=True)

HEADER_KERNEL = '#include "cfg.h"\nextern "C" __global__ void k(float *y) { y[0] = VAL; }\n'


def _key(compiler, kernel: Kernel, arch: str = "sm_90") -> str:
    """The key `_build` gives `kernel` (nothing compiled): where only the key is checked."""
    return kernel_key(kernel, arch, compiler.toolchain.identity)


def _build(compiler, kernel: Kernel, arch: str = "sm_90"):
    unit = CompileUnit(_key(compiler, kernel, arch), kernel, arch)
    return unit.key, compile_batch(compiler, [unit], jobs=1)


def test_nvrtc_reads_no_header_from_the_working_folder_that_the_key_misses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    compiler = NVRTC.NvrtcCompiler(ptx="auto")
    (tmp_path / "cfg.h").write_text("#define VAL 3.0f\n")
    plain = Kernel(HEADER_KERNEL, "k", "P", language="cuda")
    key, built = _build(compiler, plain)
    if key in built.built:  # NVRTC read ./cfg.h: an edit must then be another kernel
        (tmp_path / "cfg.h").write_text("#define VAL 5.0f\n")
        assert _key(compiler, plain) != key, "an edited header in the working folder hit"
    log = built.failures[key].log
    assert 'cannot open source file "cfg.h"' in log and "-I" in log, log
    assert "/proc/" not in log, "the log names the program as warm.cu"
    # Named by -I (relative: the working folder's), it is found, keyed and followed.
    named = Kernel(HEADER_KERNEL, "k", "P", language="cuda", options=("-I.",))
    key3, built3 = _build(compiler, named)
    assert b"1077936128" in built3.built[key3].ptx  # 3.0f
    (tmp_path / "cfg.h").write_text("#define VAL 5.0f\n")
    key5, built5 = _build(compiler, named)
    assert key5 != key3 and b"1084227584" in built5.built[key5].ptx  # 5.0f


ASSERTING = "__global__ void chk(int *y) { assert(y[0] == 1); y[1] = 2; }"


@pytest.mark.parametrize("option", ["-DNDEBUG", "-DNDEBUG=1"])
def test_pycuda_ndebug_turns_off_assert_as_on_nvccs_command_line(option: str) -> None:
    from warmcli.pycuda import SourceModule

    compiler = NVRTC.NvrtcCompiler(ptx="auto")
    mod = SourceModule(ASSERTING, options=[option])
    key, built = _build(compiler, mod.get_function("chk").kernel("P"))
    assert b"__assertfail" not in built.built[key].ptx, "NDEBUG set after assert.h was read"
    plain = SourceModule(ASSERTING, options=[])  # without it, assert stays
    key, built = _build(compiler, plain.get_function("chk").kernel("P"))
    assert b"__assertfail" in built.built[key].ptx
    lifted = SourceModule(ASSERTING.replace("1)", "N)"), options=["-DN=1"])
    assert lifted.defines == {"N": "1"}, "a plain -D still becomes a warm define"


SCALED = (
    "#ifndef SCALE\n#define SCALE 3.0f\n#endif\n"
    'extern "C" __global__ void sc(float *y) { y[0] = SCALE; }\n'
)


@pytest.mark.parametrize("variable", ["CPATH", "CPLUS_INCLUDE_PATH"])
def test_a_header_nvcc_finds_through_cpath_keys_its_kernel(
    variable: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """nvcc preprocesses device code with gcc, which searches `CPATH` (as `-I`) and, for
    C++, `CPLUS_INCLUDE_PATH`: a header found only there is built, so it is keyed."""
    from tests.conftest import nvcc_or_skip
    from warmcli.backends.cuda.nvcc import NvccCompiler

    compiler = NvccCompiler(nvcc_or_skip(), ptx="auto")
    for name in ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(variable, str(tmp_path))
    monkeypatch.setattr(kernel_module, "_ENV_INCLUDES", {})  # read once a process: anew
    (tmp_path / "cfg.h").write_text("#define VAL 3.0f\n")
    kernel = Kernel(HEADER_KERNEL, "k", "P", language="cuda")
    key3, built3 = _build(compiler, kernel)
    assert b"1077936128" in built3.built[key3].ptx  # 3.0f: nvcc read it
    (tmp_path / "cfg.h").write_text("#define VAL 5.0f\n")
    key5, built5 = _build(compiler, kernel)
    assert b"1084227584" in built5.built[key5].ptx  # 5.0f
    assert key5 != key3, "an edited header, one key"
    plain = Kernel(SCALED, "sc", "P", language="cuda")  # reaching no header there: as before
    identity = compiler.toolchain.identity
    assert kernel_key(plain, "sm_90", identity) == kernel_module._digest(
        {"arch": "sm_90", "kernel": plain.content_hash, "toolchain": identity}
    )


NVCC_VARIABLES = ("NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", "NVCC_CCBIN")


@pytest.fixture(scope="module")
def nvcc_plain() -> tuple[str, bytes]:
    """`SCALED`'s key and PTX as nvcc builds it with none of `NVCC_VARIABLES` set (a
    compiler of its own): the same build each variable's test starts from, made once."""
    from tests.conftest import nvcc_or_skip
    from warmcli.backends.cuda.nvcc import NvccCompiler

    compiler = NvccCompiler(nvcc_or_skip(), ptx="auto")
    with pytest.MonkeyPatch.context() as unset:
        for name in NVCC_VARIABLES:
            unset.delenv(name, raising=False)
        plain, built = _build(compiler, Kernel(SCALED, "sc", "P", language="cuda"))
    return plain, built.built[plain].ptx


@pytest.mark.parametrize("variable", NVCC_VARIABLES)
def test_what_nvcc_takes_from_the_environment_keys_its_kernels(
    variable: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, nvcc_plain: tuple[str, bytes]
) -> None:
    """The options nvcc adds, and the host compiler it preprocesses device code with."""
    from tests.conftest import nvcc_or_skip
    from warmcli.backends.cuda.nvcc import NvccCompiler

    compiler = NvccCompiler(nvcc_or_skip(), ptx="auto")
    kernel = Kernel(SCALED, "sc", "P", language="cuda")
    for name in NVCC_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    plain, ptx = nvcc_plain
    assert _key(compiler, kernel) == plain, "this compiler keys the plain build alike"
    assert b"1077936128" in ptx  # 3.0f
    value = "-DSCALE=5.0f"
    if variable == "NVCC_CCBIN":  # another host compiler: one that defines SCALE
        cc = shutil.which("gcc") or pytest.skip("no gcc")
        (tmp_path / "gcc").write_text(f'#!/bin/sh\nexec {cc} -DSCALE=5.0f "$@"\n')
        (tmp_path / "gcc").chmod(0o755)
        value = str(tmp_path / "gcc")
    monkeypatch.setenv(variable, value)
    flagged, built = _build(compiler, kernel)
    assert b"1084227584" in built.built[flagged].ptx  # 5.0f: nvcc read the variable
    assert flagged != plain, "nvcc built otherwise, under the same key"
    monkeypatch.setenv(variable, "")
    assert _key(compiler, kernel) == plain, "set and empty: as unset"


@pytest.mark.parametrize("which", ["nvrtc", "nvcc"])
def test_the_ptx_of_an_arch_specific_build_is_the_ptx_its_key_names(which: str) -> None:
    """`sm_90a`'s PTX is stored as the kernel built for `compute_90`, the key an `sm_90`
    build's PTX has: it must be that PTX (its entry named after its cubin's key, as each
    row's symbol says), not `.target sm_90a` PTX (which no driver JITs for a newer GPU)."""
    if which == "nvrtc":
        compiler = NVRTC.NvrtcCompiler(ptx="auto")
    else:
        from tests.conftest import nvcc_or_skip
        from warmcli.backends.cuda.nvcc import NvccCompiler

        compiler = NvccCompiler(nvcc_or_skip(), ptx="auto")
    kernel = Kernel(SCALED, "sc", "P", language="cuda")
    ptx = {}
    for arch in ("sm_90", "sm_90a"):
        key, built = _build(compiler, kernel, arch)
        group = built.built[key]
        ptx[arch] = (
            group.ptx_arch,
            kernel_key(kernel, group.ptx_arch, compiler.toolchain.identity),
        )
        assert b".target sm_90\n" in group.ptx or b".target sm_90\r\n" in group.ptx, arch
        ptx[arch] += (re.sub(rb"warm_[0-9a-f]{16}_", b"warm_", group.ptx),)
    assert ptx["sm_90"] == ptx["sm_90a"], "one key, one PTX"


def test_a_header_nvrtc_finds_in_cuda_home_keys_its_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """NVRTC reads `CUDA_HOME`'s include folder after the toolkit packages' (a system
    toolkit's `curand_kernel.h`): a header reached only there is keyed, as `CPATH`'s are
    for a host kernel, and a kernel reaching none keys as before."""
    kernel = Kernel(
        '#include <warm_tk_only.h>\nextern "C" __global__ void t(float *y) { y[0] = TKV; }\n',
        "t",
        "P",
        language="cuda",
    )
    half = '#include <cuda_fp16.h>\nextern "C" __global__ void h(__half *x) { x[0] = 1; }\n'
    # `other` reaches no header; `half` one the packages hold, before CUDA_HOME's copy.
    other, half = (
        Kernel(SCALED, "sc", "P", language="cuda"),
        Kernel(half, "h", "P", language="cuda"),
    )
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(kernel_module, "_ENV_INCLUDES", {})
    compiler = NVRTC.NvrtcCompiler(ptx="auto")
    before = {k.entry: _key(compiler, k) for k in (other, half)}
    seen = {}
    for home, value in (("a", "3.0f"), ("b", "5.0f")):
        (tmp_path / home / "include").mkdir(parents=True)
        (tmp_path / home / "include" / "warm_tk_only.h").write_text(f"#define TKV {value}\n")
        (tmp_path / home / "include" / "cuda_fp16.h").write_text("#error not this one\n")
        monkeypatch.setenv("CUDA_HOME", str(tmp_path / home))
        monkeypatch.setattr(kernel_module, "_ENV_INCLUDES", {})  # read once a process: anew
        compiler = NVRTC.NvrtcCompiler(ptx="auto")
        key, built = _build(compiler, kernel)
        seen[key] = built.built[key].ptx
        for k in (other, half):
            assert _key(compiler, k) == before[k.entry], f"{k.entry} reaches none there"
    assert len(seen) == 2, "two toolkits' headers, one key"


@pytest.mark.parametrize("spelling", [("-include", "{}"), ("--pre-include={}",)])
def test_pycuda_defines_reach_a_pre_included_header_as_on_the_command_line(
    tmp_path: Path, spelling: tuple[str, ...]
) -> None:
    from warmcli.pycuda import SourceModule

    pre = tmp_path / "pre.h"
    pre.write_text("#ifdef X\n#define PREV 5.0f\n#else\n#define PREV 3.0f\n#endif\n")
    options = [s.format(pre) for s in spelling] + ["-DX=1"]
    mod = SourceModule("__global__ void p(float *y) { y[0] = PREV; }", options=options)
    key, built = _build(NVRTC.NvrtcCompiler(ptx="auto"), mod.get_function("p").kernel("P"))
    assert b"1084227584" in built.built[key].ptx, "X was set after the pre-included header"


@pytest.mark.parametrize("spelling", [("--options-file", "{}"), ("-optf", "{}"), ("-optf={}",)])
def test_an_nvcc_options_file_no_key_reads_is_refused_naming_it(
    tmp_path: Path, spelling: tuple[str, ...]
) -> None:
    from tests.conftest import nvcc_or_skip
    from warmcli.backends.cuda.nvcc import NvccCompiler

    (tmp_path / "opts.txt").write_text("-DSCALE=5.0f\n")
    options = tuple(s.format(tmp_path / "opts.txt") for s in spelling)
    kernel = Kernel(SCALED, "sc", "P", language="cuda", options=options)
    key, built = _build(NvccCompiler(nvcc_or_skip(), ptx="auto"), kernel)
    assert key not in built.built, "options read from a file, which no key covers"
    assert spelling[0].split("=")[0] in built.failures[key].log


def test_the_host_compiler_nvcc_finds_on_path_keys_its_kernels(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tests.conftest import nvcc_or_skip
    from warmcli.backends.cuda.nvcc import NvccCompiler

    compiler = NvccCompiler(nvcc_or_skip(), ptx="auto")
    kernel = Kernel(SCALED, "sc", "P", language="cuda")
    monkeypatch.delenv("NVCC_CCBIN", raising=False)
    plain = _key(compiler, kernel)
    for name in ("gcc", "g++"):
        real = shutil.which(name) or pytest.skip(f"no {name}")
        (tmp_path / name).write_text(f'#!/bin/sh\nexec {real} -DSCALE=5.0f "$@"\n')
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    other, built = _build(compiler, kernel)
    assert b"1084227584" in built.built[other].ptx  # 5.0f: nvcc used that host compiler
    assert other != plain


CLI_WORKLOAD = f"""\
from warmcli import Kernel
DEVICE = "cuda"
K = Kernel({SCALED!r}, "sc", "P", language="cuda")
def workload(rt):
    rt.launch(K, rt.buffer(4), grid=1, block=1)
"""


def test_a_build_without_nvccs_environment_options_is_not_served_with_them(
    warm, tmp_path: Path
) -> None:
    """Through the real CLI: warmed without `NVCC_APPEND_FLAGS`, verified with it, the
    kernel is a miss (toolchain), built as a cold process with it builds it: not served."""
    from tests.conftest import nvcc_or_skip

    nvcc_or_skip()
    (tmp_path / "sw.py").write_text(CLI_WORKLOAD)
    bundle = tmp_path / "s.warm"
    for name in ("NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", "NVCC_CCBIN"):
        warm.env.pop(name, None)
    args = ("--arch", "sm_90", "--compiler", "nvcc")
    run = warm("run", tmp_path / "sw.py", *args, "-b", bundle, "-q")
    assert run.returncode == 0, run.stderr + run.stdout
    verify = ("verify", bundle, "--workload", tmp_path / "sw.py", *args, "--json")
    same = warm(*verify)
    assert json.loads(same.stdout)["compilation"]["compiled"] == 0, same.stdout
    warm.env["NVCC_APPEND_FLAGS"] = "-DSCALE=5.0f"
    flagged = warm(*verify, "--explain-misses")
    report = json.loads(flagged.stdout)
    assert not report["verified"] and report["compilation"]["queued"] == 1, flagged.stdout
    assert [e["reason"] for e in report["explanations"]] == ["toolchain"], report["explanations"]


@pytest.mark.parametrize(
    "options", [("--keep-dir=kd",), ("-keep-dir", "kd"), ("--dryrun",), ("--version",)]
)
def test_an_nvcc_option_that_moves_its_files_is_refused_not_a_traceback(
    options: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.conftest import nvcc_or_skip
    from warmcli.backends.cuda.nvcc import NvccCompiler

    monkeypatch.chdir(tmp_path)
    (tmp_path / "kd").mkdir()
    kernel = Kernel(SCALED, "sc", "P", language="cuda", options=options)
    key, built = _build(NvccCompiler(nvcc_or_skip(), ptx="auto"), kernel)
    log = built.failures[key].log
    assert ("reserved" in log or "wrote no" in log) and options[0] in log, log


@pytest.mark.parametrize("option", ["-dlto", "--dlink-time-opt"])
def test_an_nvrtc_option_that_builds_no_cubin_is_a_compile_failure(option: str) -> None:
    kernel = Kernel(SCALED, "sc", "P", language="cuda", options=(option,))
    key, built = _build(NVRTC.NvrtcCompiler(ptx="auto"), kernel)
    assert "not a cubin" in built.failures[key].log and option in built.failures[key].log


@pytest.mark.parametrize("quote", ['"{}"', "<{}>"])
def test_a_header_included_by_its_absolute_path_keys_its_kernel(tmp_path: Path, quote: str) -> None:
    header = tmp_path / "abs_cfg.h"
    header.write_text("#define VAL 3.0f\n")
    source = HEADER_KERNEL.replace('"cfg.h"', quote.format(header))
    kernel = Kernel(source, "k", "P", language="cuda")
    compiler = NVRTC.NvrtcCompiler(ptx="auto")
    key3, built3 = _build(compiler, kernel)
    assert b"1077936128" in built3.built[key3].ptx  # 3.0f: the compiler read it
    header.write_text("#define VAL 5.0f\n")
    key5, built5 = _build(compiler, kernel)
    assert b"1084227584" in built5.built[key5].ptx
    assert key5 != key3, "an edited header, one key"
    relative = Kernel(HEADER_KERNEL, "k", "P", language="cuda")  # no folder: as before
    assert kernel_module.included_headers(relative) == "" and not relative.reads_headers


def test_a_host_kernels_header_by_absolute_path_is_keyed_too(tmp_path: Path) -> None:
    header = tmp_path / "h.h"
    header.write_text("#define V 1\n")
    kernel = Kernel(f'#include "{header}"\nvoid f(int *x) {{ x[0] = V; }}', "f", "P")
    first = kernel_key(kernel, "x86_64", "cc:gcc 12")
    header.write_text("#define V 2\n")
    assert kernel_key(kernel, "x86_64", "cc:gcc 12") != first


def test_a_header_a_source_only_asks_for_with_has_include_is_keyed(tmp_path: Path) -> None:
    """`__has_include("opt.h")` in a folder the options name: adding the header there
    changes what is built, so it changes the key (its presence, as an include's)."""
    (tmp_path / "inc").mkdir()
    source = (
        '#if __has_include("opt.h")\n#define VAL 5.0f\n#else\n#define VAL 3.0f\n#endif\n'
        'extern "C" __global__ void k(float *y) { y[0] = VAL; }\n'
    )
    kernel = Kernel(source, "k", "P", language="cuda", options=(f"-I{tmp_path / 'inc'}",))
    compiler = NVRTC.NvrtcCompiler(ptx="auto")
    key3, built3 = _build(compiler, kernel)
    assert b"1077936128" in built3.built[key3].ptx  # 3.0f
    (tmp_path / "inc" / "opt.h").write_text("\n")
    key5, built5 = _build(compiler, kernel)
    assert b"1084227584" in built5.built[key5].ptx  # 5.0f
    assert key5 != key3, "a header that appeared, one key"


def test_a_header_asked_for_by_its_absolute_path_with_has_include_is_keyed(
    tmp_path: Path,
) -> None:
    """`__has_include("/abs/opt.h")`, no include folder named: as an `#include` of an
    absolute path, the header's presence changes the build, so it changes the key."""
    opt = tmp_path / "opt.h"
    source = (
        f'#if __has_include("{opt}")\n#define VAL 5.0f\n#else\n#define VAL 3.0f\n#endif\n'
        'extern "C" __global__ void k(float *y) { y[0] = VAL; }\n'
    )
    kernel = Kernel(source, "k", "P", language="cuda")
    compiler = NVRTC.NvrtcCompiler(ptx="auto")
    key3, built3 = _build(compiler, kernel)
    assert b"1077936128" in built3.built[key3].ptx  # 3.0f
    opt.write_text("\n")
    key5, built5 = _build(compiler, kernel)
    assert b"1084227584" in built5.built[key5].ptx  # 5.0f
    assert key5 != key3, "a header that appeared, one key"


def test_a_cuda_home_header_shadowing_an_include_folders_is_keyed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "inc").mkdir()
    (tmp_path / "home" / "include").mkdir(parents=True)
    (tmp_path / "inc" / "warm_both.h").write_text("#define VAL 3.0f\n")
    (tmp_path / "home" / "include" / "warm_both.h").write_text("#define VAL 5.0f\n")
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(kernel_module, "_ENV_INCLUDES", {})
    source = HEADER_KERNEL.replace("cfg.h", "warm_both.h")
    kernel = Kernel(source, "k", "P", language="cuda", options=(f"-I{tmp_path / 'inc'}",))
    compiler = NVRTC.NvrtcCompiler(ptx="auto")
    before, built = _build(compiler, kernel)
    assert b"1084227584" in built.built[before].ptx  # 5.0f: NVRTC read CUDA_HOME's
    (tmp_path / "home" / "include" / "warm_both.h").write_text("#define VAL 7.0f\n")
    assert _key(compiler, kernel) != before
