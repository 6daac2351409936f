"""A CUDA kernel's key searches headers where its compiler does (real NVRTC and nvcc,
compile-only: no GPU).

NVRTC reads the toolkit packages' folders, then `CUDA_HOME`'s, before a kernel's `-I` ones:
a header the packages hold is theirs (NVRTC's identity), whatever a `-I` folder holds. nvcc's
gcc reads `CPATH` and `CPLUS_INCLUDE_PATH` after nvcc's own toolkit folders: a header found
only there keys its kernel, one the toolkit holds (`module load cuda` points `CPATH` at its
`include`) does not, and where the nvcc that built a kernel is not this process's, a kernel
reaching a header there is a miss, never another build served. The `gcc` nvcc runs from
`PATH` is in nvcc's identity: another one's builds are not served where a compiler is.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from forked_tool_env import forked_tool_warm

from warmcli import compiler_includes
from warmcli import kernel as kernel_module
from warmcli.backends.batch import compile_batch
from warmcli.backends.compiler import CompileUnit
from warmcli.kernel import Kernel, kernel_key

NVRTC = pytest.importorskip("warmcli.backends.cuda.nvrtc")
if NVRTC.find_nvrtc() is None:  # pragma: no cover - make install brings NVRTC
    pytest.skip("NVRTC not installed (cuda-bindings, nvidia-cuda-nvrtc)", allow_module_level=True)

HALF = '#include <cuda_fp16.h>\nextern "C" __global__ void h(__half *x) { x[0] = 1; }\n'
CFG = '#include "cfg.h"\nextern "C" __global__ void k(float *y) { y[0] = VAL; }\n'
# conftest's `warm`, its commands forks of one server whatever CPATH or PATH a test
# points at a folder of its own (`tests/forked_tool_env.py`: each test's were a server's start)
tool_servers, warm = forked_tool_warm()
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


def _nvcc():
    from tests.conftest import nvcc_or_skip
    from warmcli.backends.cuda.nvcc import NvccCompiler

    return NvccCompiler(nvcc_or_skip(), ptx="auto")


def test_a_toolkit_header_nvcc_reads_before_cpath_keys_as_without_cpath(
    tmp_path: Path, clean: pytest.MonkeyPatch
) -> None:
    """`CPATH` at the toolkit's own `include` (`module load cuda`), or at a folder holding a
    header of a toolkit's name (which nvcc reads from its toolkit first): keyed as unset."""
    from warmcli.backends.cuda.host_options import toolkit_includes

    compiler = _nvcc()
    kernel = Kernel(HALF, "h", "P", language="cuda")
    plain = _build(compiler, kernel)[0]
    own = toolkit_includes(compiler.path)
    assert own is not None and Path(own[0], "cuda_fp16.h").is_file(), own
    (tmp_path / "cuda_fp16.h").write_text("#error not this one\n")
    for cpath in (own[0], str(tmp_path)):
        clean.setenv("CPATH", cpath)
        clean.setattr(kernel_module, "_ENV_INCLUDES", {})
        key, built = _build(compiler, kernel)
        assert key == plain and key in built.built, cpath
    # Another nvcc's build (a bundle's, no nvcc here): its folders unknown, the header keyed
    # (a miss where the variable differs from the warming's, never another build served).
    other = "nvcc:another release"
    clean.setenv("CPATH", own[0])
    clean.setattr(kernel_module, "_ENV_INCLUDES", {})
    with_cpath = kernel_key(kernel, "sm_90", other)
    clean.delenv("CPATH")
    clean.setattr(kernel_module, "_ENV_INCLUDES", {})
    assert kernel_key(kernel, "sm_90", other) != with_cpath


def test_a_cpath_header_unknown_toolkit_is_keyed_so_a_bundle_build_is_a_miss(
    tmp_path: Path, clean: pytest.MonkeyPatch
) -> None:
    """Keyed by a process that does not know which folders are nvcc's (no nvcc: the bundle's
    toolchain), a kernel reaching a header through `CPATH` keys by that header's content."""
    clean.setenv("CPATH", str(tmp_path))
    (tmp_path / "cfg.h").write_text("#define VAL 3.0f\n")
    kernel = Kernel(CFG, "k", "P", language="cuda")
    identity = "nvcc:Cuda compilation tools, release 13.0, V13.0.0 [none here]"
    assert identity not in compiler_includes.NVCC_TOOLKITS
    three = kernel_key(kernel, "sm_90", identity)
    (tmp_path / "cfg.h").write_text("#define VAL 5.0f\n")
    assert kernel_key(kernel, "sm_90", identity) != three
    reaching_none = Kernel(
        CFG.replace('#include "cfg.h"', "#define VAL 1"), "k", "P", language="cuda"
    )
    assert "headers" not in kernel_module.key_components(reaching_none, "sm_90", identity)


CLI_WORKLOAD = f"""\
from warmcli import Kernel
DEVICE = "cuda"
K = Kernel({CFG!r}, "k", "P", language="cuda")
def workload(rt):
    rt.launch(K, rt.buffer(4), grid=1, block=1)
"""


def test_an_edited_cpath_header_is_a_miss_through_the_cli(warm, tmp_path: Path) -> None:
    """Warmed with `CPATH` naming the header's folder, verified after an edit there: the
    kernel is a `headers` miss (before: served the old build, the key blind to it)."""
    from tests.conftest import nvcc_or_skip

    nvcc_or_skip()
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "cfg.h").write_text("#define VAL 3.0f\n")
    (tmp_path / "w.py").write_text(CLI_WORKLOAD)
    bundle = tmp_path / "b.warm"
    for name in (*CLEARED, "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", "NVCC_CCBIN"):
        warm.env.pop(name, None)
    warm.env["CPATH"] = str(tmp_path / "inc")
    args = ("--arch", "sm_90", "--compiler", "nvcc")
    run = warm("run", tmp_path / "w.py", *args, "-b", bundle, "-q")
    assert run.returncode == 0, run.stderr + run.stdout
    verify = ("verify", bundle, "--workload", tmp_path / "w.py", *args, "--json")
    same = warm(*verify)
    assert json.loads(same.stdout)["compilation"]["compiled"] == 0, same.stdout
    (tmp_path / "inc" / "cfg.h").write_text("#define VAL 5.0f\n")
    edited = warm(*verify, "--explain-misses")
    report = json.loads(edited.stdout)
    assert not report["verified"] and report["compilation"]["queued"] == 1, edited.stdout
    assert [e["reason"] for e in report["explanations"]] == ["headers"], report["explanations"]


SCALED = (
    "#ifndef SCALE\n#define SCALE 3.0f\n#endif\n"
    'extern "C" __global__ void sc(float *y) { y[0] = SCALE; }\n'
)
SCALED_WORKLOAD = CLI_WORKLOAD.replace(repr(CFG), repr(SCALED)).replace('"k"', '"sc"')


def _wrapped_gcc(folder: Path) -> None:
    """A `gcc` (and `g++`) that defines SCALE: another host compiler, on `PATH` first."""
    import shutil

    for name in ("gcc", "g++"):
        real = shutil.which(name) or pytest.skip(f"no {name}")
        (folder / name).write_text(f'#!/bin/sh\nexec {real} -DSCALE=5.0f "$@"\n')
        (folder / name).chmod(0o755)


def test_a_build_by_another_host_compiler_on_path_is_not_served(warm, tmp_path: Path) -> None:
    """Warmed with the system gcc, verified with a wrapper gcc first on `PATH` (which nvcc
    runs, and which changes what it builds): a `toolchain` miss, naming both compilers."""
    from tests.conftest import nvcc_or_skip

    nvcc_or_skip()
    (tmp_path / "w.py").write_text(SCALED_WORKLOAD)
    bundle = tmp_path / "b.warm"
    for name in (*CLEARED, "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", "NVCC_CCBIN"):
        warm.env.pop(name, None)
    args = ("--arch", "sm_90", "--compiler", "nvcc")
    run = warm("run", tmp_path / "w.py", *args, "-b", bundle, "-q")
    assert run.returncode == 0, run.stderr + run.stdout
    verify = ("verify", bundle, "--workload", tmp_path / "w.py", *args, "--json")
    same = warm(*verify)
    assert json.loads(same.stdout)["compilation"]["compiled"] == 0, same.stdout
    (tmp_path / "bin").mkdir()
    _wrapped_gcc(tmp_path / "bin")
    warm.env["PATH"] = f"{tmp_path / 'bin'}:{warm.env.get('PATH', '')}"
    other = warm(*verify, "--explain-misses")
    report = json.loads(other.stdout)
    assert not report["verified"] and report["compilation"]["queued"] == 1, other.stdout
    (explained,) = report["explanations"]
    assert explained["reason"] == "toolchain" and "host compiler" in str(explained), explained


def test_an_older_warms_nvcc_build_is_not_served_to_an_nvcc_naming_its_host_compiler() -> None:
    """Pure logic (fake records): a build whose nvcc identity names no host compiler (an older
    warm's) is not served where nvcc names one (built once more); NVRTC's builds and nvcc's
    are served for each other as before, and a process without a compiler serves either."""
    from warmcli.backends.serving import Target, nvcc_host, why_not
    from warmcli.records import KernelRecord

    release = "Cuda compilation tools, release 13.0, V13.0.88"
    ours = f"nvcc:{release}; host compiler gcc 12.2.0 [warm build recipe 4]"
    assert nvcc_host(ours) == "host compiler gcc 12.2.0"

    def fake(toolchain: str) -> KernelRecord:
        return KernelRecord("k" * 64, "d", "cuda", "sm_90", "sc", "sc", "s", "0", toolchain)

    target = Target("cuda", "sm_90", "13.0", ours)
    older = fake(f"nvcc:{release} [warm build recipe 4]")
    assert why_not(older, target) is not None and why_not(older, target)[0] == "toolchain"
    other_gcc = fake(ours.replace("12.2.0", "13.1.0"))
    assert why_not(other_gcc, target)[0] == "toolchain"
    assert why_not(fake(ours), target) is None
    assert why_not(fake("nvrtc:13.0 [warm build recipe 4]"), target) is None
    assert why_not(older, Target("cuda", "sm_90", "13.0", None)) is None  # no compiler here


def test_clean_keeps_another_gcc_nvcc_build_and_drops_an_older_warms() -> None:
    """Pure logic (fake records and machine): beside this machine's own nvcc build, a build
    by nvcc with another `gcc` is another configuration (kept, as `NVCC_APPEND_FLAGS`'), one
    whose older warm named no `gcc` is superseded (dropped)."""
    from warmcli.ops.foreign import Machine, kernel_foreign, local_builds
    from warmcli.records import KernelRecord

    release = "nvcc:Cuda compilation tools, release 13.0, V13.0.88"
    ours = f"{release}; host compiler gcc 12.2.0 [warm build recipe 4]"

    def fake(toolchain: str) -> KernelRecord:
        key = str(abs(hash(toolchain)) % 10**60).rjust(64, "0")
        return KernelRecord(key, "d", "cuda", "sm_90", "sc", "sc", "s", key, toolchain)

    machine = Machine({"nvcc": ours}, "x86_64", frozenset(), frozenset({"cuda"}),
                      frozenset({("sm_90", "13.0")}))  # fmt: skip
    local = local_builds([fake(ours)], machine)
    assert local, "this machine's own build, served here"
    older = kernel_foreign(fake(f"{release} [warm build recipe 4]"), machine, local)
    assert older[0] is not None and "superseded" in older[0], older
    other = kernel_foreign(fake(ours.replace("12.2.0", "13.1.0")), machine, local)
    assert other == (None, None), other
