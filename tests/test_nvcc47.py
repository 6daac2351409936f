"""Stop 47: a header a CUDA kernel's `-I` folder shadows where nvcc's or NVRTC's own headers
include it is keyed, as stop 46 keyed it for host kernels.

- nvcc hands its host compiler the kernel's `-I` folders before its toolkit's and the
  compiler's own: a `features.h` added to `-I inc` after `warm run`, which `<stdint.h>` reaches,
  changed the cubin while the key stayed (`warm verify --workload` said complete). nvcc's own
  folders (its `--dryrun`'s) and its `gcc`'s C++ ones (`gcc -E -v -x c++`) are the system
  folders of its kernels now (`warmcli.system_shadows` follows their includes).
- nvcc reads `cuda_runtime.h` before every kernel (`-include`, searched in `-I` first): an
  `inc/cuda_runtime.h`, or a name it reaches (`stdlib.h`, `builtin_types.h`), changed the build
  of a kernel that includes nothing. Followed as the kernel's first include now.
- NVRTC searches a kernel's `-I` folders after its own: a name none of its folders holds that its
  headers ask for (`__has_include(<version>)` in CCCL's `<cuda/std/cstdint>`) was read from
  `-I` unkeyed. Such a name those folders hold is keyed now.
- A kernel whose folders shadow none keys as before (nvcc, NVRTC and host kernels).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import Warm, nvcc_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

NVCC_WORKLOAD = """
import os
from warmcli import Kernel
DEVICE = "cuda"
HERE = os.path.dirname(os.path.abspath(__file__))
K = Kernel('#include <stdint.h>\\nextern "C" __global__ void k(int *o) {\\n#ifdef SHADOWED\\n'
           ' o[0] = SHADOWED;\\n#else\\n o[0] = 1;\\n#endif\\n}\\n', "k", "P", language="cuda",
           options=(f"-I{HERE}/inc",))
def workload(rt):
    rt.launch(K, rt.buffer(4), grid=1, block=1)
"""
PLAIN = (
    '#ifndef SHADOWED\n#define SHADOWED 1\n#endif\nextern "C" __global__ void k(int *o) '
    "{ o[0] = SHADOWED; }\n"
)


def _stored(warm: Warm, workload: Path) -> int:
    done = warm("run", workload, "--arch", "sm_90", "-b", workload.with_name("b.warm"), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return int(json.loads(done.stdout)["stored"]["kernels"])


@pytest.mark.nvcc
def test_a_header_stdint_reaches_added_to_an_nvcc_kernels_folder_builds_again(
    warm: Warm, tmp_path: Path
) -> None:
    nvcc_or_skip()
    (tmp_path / "inc").mkdir()
    workload = tmp_path / "w.py"
    workload.write_text(NVCC_WORKLOAD)
    nvcc = warm.with_env(WARM_CUDA_COMPILER="nvcc")
    assert _stored(nvcc, workload) > 0
    assert _stored(nvcc, workload) == 0  # as before: nothing new
    (tmp_path / "inc" / "features.h").write_text(
        "#define SHADOWED 42\n#include_next <features.h>\n"
    )
    assert _stored(nvcc, workload) > 0  # was 0: the old cubin kept, served


def _nvcc_key_and_cubin(source: str, inc: Path) -> tuple[str, bytes]:
    from warmcli import Kernel
    from warmcli.backends.compiler import CompileUnit
    from warmcli.backends.cuda.nvcc import NvccCompiler
    from warmcli.kernel import kernel_key

    compiler = NvccCompiler()
    kernel = Kernel(source, "k", "P", language="cuda", options=(f"-I{inc}",))
    key = kernel_key(kernel, "sm_90", compiler.toolchain.identity)
    built = compiler.compile_group([CompileUnit(key, kernel, "sm_90")])
    return key, built.binary


@pytest.mark.nvcc
@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("cuda_runtime.h", '#define SHADOWED 42\n#include_next "cuda_runtime.h"\n'),
        ("stdlib.h", "#define SHADOWED 42\n#include_next <stdlib.h>\n"),
    ],
)
def test_what_nvccs_implicit_cuda_runtime_reaches_in_a_kernels_folder_is_keyed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str
) -> None:
    nvcc_or_skip()
    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "own.h").write_text("#define OWN 1\n")
    before = _nvcc_key_and_cubin(PLAIN, inc)
    (inc / name).write_text(text)
    after = _nvcc_key_and_cubin(PLAIN, inc)
    assert after[1] != before[1]  # nvcc read it: another cubin
    assert after[0] != before[0]  # and another key (was the same)


def _nvrtc_key_and_cubin(source: str, inc: Path) -> tuple[str, bytes]:
    from warmcli import Kernel
    from warmcli.backends.compiler import CompileUnit
    from warmcli.backends.cuda.nvrtc import NvrtcCompiler
    from warmcli.kernel import kernel_key

    compiler = NvrtcCompiler()
    kernel = Kernel(source, "k", "P", language="cuda", options=(f"-I{inc}",))
    key = kernel_key(kernel, "sm_90", compiler.toolchain.identity)
    built = compiler.compile_group([CompileUnit(key, kernel, "sm_90")])
    return key, built.binary


def test_a_name_nvrtcs_headers_ask_for_found_only_in_a_kernels_folder_is_keyed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conftest import nvrtc_release_or_skip

    nvrtc_release_or_skip()
    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    inc = tmp_path / "inc"
    inc.mkdir()
    source = "#include <cuda/std/cstdint>\n" + PLAIN
    before = _nvrtc_key_and_cubin(source, inc)
    (inc / "version").write_text("#define SHADOWED 42\n")
    after = _nvrtc_key_and_cubin(source, inc)
    assert after[1] != before[1]  # NVRTC read it (`__has_include(<version>)`)
    assert after[0] != before[0]  # was the same key


@pytest.mark.nvcc
def test_kernels_whose_folders_shadow_nothing_key_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nvcc, NVRTC and host kernels with `-I` folders that hold no name their compiler's own
    headers include: the key with those folders told is the key without (an earlier warm's)."""
    nvcc_or_skip()
    from warmcli import Kernel
    from warmcli.backends.cuda.nvcc import NvccCompiler
    from warmcli.backends.cuda.nvrtc import NvrtcCompiler, find_nvrtc
    from warmcli.backends.host.compiler import HostCompiler
    from warmcli.kernel import CC_SYSTEM, kernel_key

    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "own.h").write_text("#define OWN 3\n")
    cuda = [
        '#include "own.h"\nextern "C" __global__ void k(int *o) { o[0] = OWN; }',
        '#include <stdint.h>\n#include <cuda_fp16.h>\nextern "C" __global__ void k(int *o) {}',
        '#include <cuda/std/cstdint>\nextern "C" __global__ void k(int *o) { o[0] = 1; }',
    ]
    host = '#include <stdlib.h>\n#include "own.h"\nvoid k(int *o) { o[0] = OWN; }'
    kernels = [(Kernel(s, "k", "P", language="cuda", options=(f"-I{inc}",)), "sm_90") for s in cuda]
    compilers = [
        (NvccCompiler(), kernels),
        (HostCompiler(), [(Kernel(host, "k", "P", options=(f"-I{inc}",)), "x86_64")]),
    ]
    if find_nvrtc() is not None:
        compilers.append((NvrtcCompiler(), kernels))
    for compiler, made in compilers:
        identity = compiler.toolchain.identity
        told = [kernel_key(k, arch, identity) for k, arch in made]
        assert CC_SYSTEM[identity]()  # its folders are told here
        system = CC_SYSTEM.pop(identity)
        try:
            assert [kernel_key(k, arch, identity) for k, arch in made] == told
        finally:
            CC_SYSTEM[identity] = system


@pytest.mark.nvcc
def test_nvcc_whose_gcc_cannot_be_found_tells_no_folders(tmp_path: Path) -> None:
    """No `gcc` on nvcc's search (nor `NVCC_CCBIN`'s file): no folders, so keys as before."""
    from warmcli.backends.cuda.own_folders import nvcc_system

    nvcc = nvcc_or_skip()
    assert nvcc_system(nvcc, str(tmp_path / "none")) == ()
    assert nvcc_system(nvcc, str(tmp_path / "none"), str(tmp_path / "no-gcc")) == ()
    gcc = shutil.which("gcc")
    if gcc is not None:  # `NVCC_CCBIN`'s file, or its folder's `gcc`: its C++ folders after nvcc's
        for ccbin in (gcc, os.path.dirname(gcc)):
            told = nvcc_system(nvcc, str(tmp_path / "none"), ccbin)
            assert len(told) > 2 and any(os.path.isfile(os.path.join(f, "cstdlib")) for f in told)


def test_a_name_nvccs_toolkit_answers_before_cpath_is_not_keyed_from_cpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nvcc searches `-I`, its toolkit's `include`, then `CPATH`: a name a system header
    includes that the toolkit and `CPATH` both hold is read from the toolkit (its identity's:
    not keyed), one `-I` holds is read there (keyed). Real files; the folders made up."""
    from warmcli.headers import headers_digest

    monkeypatch.chdir(tmp_path)
    for folder in ("inc", "toolkit", "cccl", "cp", "sys"):
        (tmp_path / folder).mkdir()
    (tmp_path / "sys" / "root.h").write_text("#include <b.h>\n")
    (tmp_path / "toolkit" / "b.h").write_text("#define B 1\n")
    (tmp_path / "inc" / "own.h").write_text("#define OWN 1\n")
    own = (str(tmp_path / "toolkit"), str(tmp_path / "cccl"))
    system = (*own, str(tmp_path / "sys"))

    def digest() -> str:
        return headers_digest(
            '#include <root.h>\n#include "own.h"\n',
            ("-Iinc",),
            (str(tmp_path / "cp"), ""),
            ((), (f"-I{own[0]}", f"-isystem{own[1]}")),
            frozenset(own),
            compiler="nvcc",
            system=lambda: system,
        )

    before = digest()
    (tmp_path / "cp" / "b.h").write_text("#define B 2\n")  # after the toolkit's: not read
    assert digest() == before
    (tmp_path / "inc" / "b.h").write_text("#define B 3\n")  # before it: read
    assert digest() != before
