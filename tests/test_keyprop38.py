"""One key, one build: what a kernel's build reads is in its key, or refused.

Found by a brute-force property run (same key => same build bytes) over what can change
what cc, nvcc and NVRTC make. Each was a stale hit (a bundle served a build that computed
what a cold start did not, and `warm verify --workload` called it a hit): an object, archive
or linker script a host kernel's options link (`/opt/lib/helper.o`, `-Wl,`, `-Xlinker`, a
`-lhelper` found through `-L` or `LIBRARY_PATH`), now keyed by content; a `cc1` found
through `COMPILER_PATH` (or `GCC_EXEC_PREFIX`), now in cc's identity and served only where
cc reads the same; nvcc's `--system-include` folder, now read as `-isystem`. Refused in one
line, as `@file` is: compiler programs from `-B folder/` (`--prefix`, `-wrapper`), a header
or folder given through `-Wp,` or nvcc's `-Xcompiler` in a spelling the key does not read,
another source in a host kernel's options (its `#include`s unfollowed) and a file its
assembly reads (`.incbin`).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Warm, nvcc_or_skip
from forked_cli import ForkedWarm
from forked_python import ForkedPython
from forked_tool_env import ToolEnvPythons, ToolEnvServers
from test_keys_exact import keys_producing  # noqa: F401  (`producing`)

from warmcli.backends.cuda.host_options import hidden_include
from warmcli.linked import linked_digest


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


HELPER = "float helper(int i) {{ return i * {scale}.0f; }}\n"

WORKLOAD = """
import os
from warmcli import Kernel

DEVICE = "host"
K = Kernel(
    "float helper(int i);\\n"
    "void f(float *o, int n) { for (int i = 0; i < n; i++) o[i] = helper(i); }\\n",
    "f", "Pi", options=OPTIONS,
)

def values(rt):
    b = rt.buffer(4, "float32")
    rt.launch(K, b, 4)
    return b

def workload(rt):
    values(rt)
"""

SERVE = """
import json, runpy, sys
import warmcli
module = runpy.run_path(sys.argv[1])
rt = warmcli.runtime("host")
print(json.dumps({"values": [float(v) for v in rt.read(module["values"](rt))],
                  "compiled": len(warmcli.report().kernels)}))
"""


def _object(folder: Path, scale: int) -> Path:
    """`helper.o` in `folder`, built (again) by the system cc with `helper` scaling by `scale`,
    and the archive `libhelper.a` holding it."""
    folder.mkdir(exist_ok=True)
    source = folder / "helper.c"
    source.write_text(HELPER.format(scale=scale))
    subprocess.run(
        ["cc", "-O2", "-fPIC", "-c", str(source), "-o", str(folder / "helper.o")], check=True
    )
    (folder / "libhelper.a").unlink(missing_ok=True)
    subprocess.run(["ar", "rcs", str(folder / "libhelper.a"), str(folder / "helper.o")], check=True)
    return folder / "helper.o"


_tools = ToolEnvPythons(ROOT)  # production processes under a tool variable of a test's
_tool_servers = ToolEnvServers(ROOT)  # and commands (`tests/forked_tool_env.py`)


@pytest.fixture(scope="module", autouse=True)
def _forking() -> Iterator[None]:
    yield
    _tools.close()
    _tool_servers.close()


def _serve(
    warm: Warm, workload: Path, bundle: Path, producing: ForkedPython | None = None
) -> dict[str, object]:
    """What a production process over `bundle` computed and compiled: a fork of `producing`
    where `warm`'s environment is its own but for WARM_* variables, else of `_tools`'
    (`LIBRARY_PATH`, `COMPILER_PATH` set, which its imports never read: read by cc, here
    and now, either way)."""
    env = dict(warm.env, WARM_BUNDLE=str(bundle))
    mine = {k: v for k, v in env.items() if not k.startswith(("WARM_", "PYTEST_CURRENT_TEST"))}
    if producing is not None and mine == producing.base:
        done = producing.run(SERVE, str(workload), env=env, cwd=ROOT, timeout=300)
    else:
        done = _tools.run(SERVE, str(workload), env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.splitlines()[-1])


# (`-Wl,-u,helper`: the archive comes before the kernel's source on cc's command line)
ARCHIVE = "-L{d}|-Wl,-u,helper|-lhelper"


@pytest.mark.parametrize("spelling", ["{o}", "-Wl,{o}", "-Xlinker|{o}", ARCHIVE, "LIBRARY_PATH"])
def test_an_object_a_kernel_links_rebuilt_with_other_code_is_a_miss(
    warm: Warm, tmp_path: Path, spelling: str, producing: ForkedPython
) -> None:
    obj = _object(tmp_path / "lib", 2)
    if spelling == "LIBRARY_PATH":  # the folder the linker searches named by the environment
        warm.env["LIBRARY_PATH"] = str(obj.parent)
        spelling = ARCHIVE.split("|", 1)[1]
    options = tuple(spelling.format(o=obj, d=obj.parent).split("|"))
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD.replace("OPTIONS", repr(options)))
    bundle = tmp_path / "b.warm"
    run = warm("run", workload, "-b", bundle, "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    verify = warm("verify", bundle, "--workload", workload, "-q")
    assert verify.returncode == 0, verify.stdout + verify.stderr  # unchanged: a hit
    served = _serve(warm, workload, bundle, producing)
    assert served == {"values": [0.0, 2.0, 4.0, 6.0], "compiled": 0}

    _object(tmp_path / "lib", 3)  # the same path, other code
    verify = warm("verify", bundle, "--workload", workload, "-q")
    assert verify.returncode == 1, verify.stdout + verify.stderr
    served = _serve(warm, workload, bundle, producing)  # as a cold start computes, never stale
    assert served["values"] == [0.0, 3.0, 6.0, 9.0], served


def test_only_files_named_by_path_outside_includes_and_defines_are_keyed(tmp_path: Path) -> None:
    """Pure logic: which option texts name a linked file (a folder, a relative name, an
    include folder's or a header's path, a define's value are not), by content."""
    obj = tmp_path / "helper.o"
    obj.write_bytes(b"one")
    script = tmp_path / "v.map"
    script.write_text("{ global: *; };")
    assert linked_digest(["-O3", f"-I{tmp_path}", "-I", str(tmp_path), "helper.o"]) == ""
    assert linked_digest(["-include", str(obj), f"-imacros{obj}", f"-DX={obj}"]) == ""
    assert linked_digest([f"-L{tmp_path}", "-Wl,-rpath," + str(tmp_path)]) == ""
    assert linked_digest(["-MF", str(obj), f"-Wp,-MD,{obj}", "-o", str(obj)]) == ""  # written
    named = [str(obj), f"-Wl,--version-script={script}", "-T", str(script)]
    first = [linked_digest([option]) for option in named[:2]] + [linked_digest(named[2:])]
    assert all(first) and first[0] != first[1]
    obj.write_bytes(b"two")
    script.write_text("{ global: f; local: *; };")
    again = [linked_digest([option]) for option in named[:2]] + [linked_digest(named[2:])]
    assert all(a != b for a, b in zip(first, again, strict=True))


@pytest.mark.parametrize(
    "options",
    [
        ("-B{d}/",),
        ("-B", "{d}"),
        ("--prefix={d}/",),
        ("-wrapper", "{d}/w,-v"),
        ("-Wp,-I{d}",),  # an include folder or header the key's own reading never saw
        ("-Wp,-include,{d}/h.h",),
    ],
)
def test_a_folder_of_compiler_programs_or_a_preprocessor_header_is_refused(
    warm: Warm, tmp_path: Path, options: tuple[str, ...]
) -> None:
    """`-B folder/` runs the `cc1` (`as`, `ld`) found there, which no key covers: refused in
    one line, as `-iprefix` is, never a build an edit there is served."""
    folder = tmp_path / "bin"
    folder.mkdir()
    given = tuple(o.format(d=folder) for o in options)
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD.replace("OPTIONS", repr(given)))
    run = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"option {given[0]!r} reads a file" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def test_a_cc1_from_compiler_path_builds_another_kernel(warm: Warm, tmp_path: Path) -> None:
    """cc runs the `cc1` it finds in `COMPILER_PATH` (or under `GCC_EXEC_PREFIX`): one that
    defines SCALE built other code under the plain compiler's key, so a process without it
    was served that build (and one with it the plain one). Now the variable is in cc's
    identity: `warm verify` calls it a miss, and each process computes what it would cold."""
    folder = tmp_path / "programs"
    folder.mkdir()
    cc1 = subprocess.run(
        ["cc", "-print-prog-name=cc1"], capture_output=True, text=True, check=True
    ).stdout.strip()
    (folder / "cc1").write_text(f'#!/bin/sh\nexec {cc1} -D SCALE=3.0f "$@"\n')
    (folder / "cc1").chmod(0o755)
    workload = tmp_path / "w.py"
    workload.write_text(
        WORKLOAD.replace(
            "float helper(int i);\\n", "#ifndef SCALE\\n#define SCALE 2.0f\\n#endif\\n"
        )
        .replace("o[i] = helper(i)", "o[i] = i * SCALE")
        .replace("OPTIONS", "()")
    )
    plain, other = tmp_path / "plain.warm", tmp_path / "other.warm"
    run = warm("run", workload, "-b", plain, "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    programs = ForkedWarm(Warm(dict(warm.env, COMPILER_PATH=str(folder))), _tool_servers)
    run = programs("run", workload, "-b", other, "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    for bundle, who, values in ((other, warm, 2.0), (plain, programs, 3.0)):
        verify = who("verify", bundle, "--workload", workload, "-q")
        assert verify.returncode == 1, verify.stdout + verify.stderr
        assert "COMPILER_PATH" in verify.stdout, verify.stdout
        served = _serve(who, workload, bundle)
        assert served["values"] == [0.0, values, 2 * values, 3 * values], served
    verify = programs("verify", other, "--workload", workload, "-q")
    assert verify.returncode == 0, verify.stdout + verify.stderr


CUDA_WORKLOAD = """
from warmcli import Kernel

DEVICE = "cuda"
K = Kernel(
    '#ifndef SCALE\\n#define SCALE 1.0f\\n#endif\\n'
    'extern "C" __global__ void f(float *o, int n) '
    '{ int i = threadIdx.x; if (i < n) o[i] = i * SCALE; }',
    "f", "Pi", language="cuda", options=OPTIONS,
)

def workload(rt):
    b = rt.buffer(4, "float32")
    rt.launch(K, b, 4, grid=(1,), block=(4,))
"""


@pytest.mark.parametrize(
    "spelling",
    [
        "-Xcompiler|-include,{d}/pre.h",  # nvcc preprocesses device code with these too
        "-Xcompiler=-I{d}/inc",
        "--compiler-options=-include,{d}/pre.h",
        "-Xcompiler|-I{d}/inc,-O2",
        # nvcc splits what -Xcompiler gives at blanks too (review38c)
        "-Xcompiler|-Wall -include {d}/pre.h",
        "--compiler-options=-O2 -I{d}/inc",
    ],
)
def test_nvcc_host_compiler_options_naming_headers_the_key_misses_are_refused(
    warm: Warm, tmp_path: Path, spelling: str
) -> None:
    """`-Xcompiler -include,pre.h` (or `-Xcompiler=-Idir`): nvcc's host compiler read a header
    there for the device code, which the key never saw (an edit of SCALE there was served the
    old cubin). Refused in one line before nvcc runs; `-Xcompiler -I/dir` alone, which the
    key reads as the kernel's `-I`, is not."""
    assert hidden_include(["-Xcompiler", "-I/opt/inc", "-Xcompiler", "-O3,-Wall"]) is None
    assert hidden_include(["-Xcompiler", "-Wall -O3", "-Xcompiler", "-I/opt/inc"]) is None
    nvcc_or_skip()
    (tmp_path / "inc").mkdir()
    (tmp_path / "pre.h").write_text("#define SCALE 3.0f\n")
    options = tuple(spelling.format(d=tmp_path).split("|"))
    workload = tmp_path / "w.py"
    workload.write_text(CUDA_WORKLOAD.replace("OPTIONS", repr(options)))
    args = ("--arch", "sm_90", "--compiler", "nvcc", "-q")
    run = warm("run", workload, "-b", tmp_path / "b.warm", *args)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "hands nvcc's host compiler an include folder or header" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def test_another_source_in_a_kernels_options_is_refused(warm: Warm, tmp_path: Path) -> None:
    """`options=("/opt/helper.c", "-I/opt/inc")`: cc compiled helper.c with the kernel, and the
    key never followed its `#include "h.h"` (an edit of SCALE there was served the old build).
    Refused in one line; a header read first (`-include /opt/cfg.h`) is not such a source."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "h.h").write_text("#define SCALE 2.0f\n")
    helper = tmp_path / "helper.c"
    helper.write_text('#include "h.h"\nfloat helper(int i) { return i * SCALE; }\n')
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD.replace("OPTIONS", repr((str(helper), f"-I{tmp_path}/inc"))))
    run = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"option {str(helper)!r} is a source cc would compile" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


INCBIN_WORKLOAD = """
from warmcli import Kernel

DEVICE = "host"
K = Kernel(
    '__asm__(".section .rodata\\\\n.global tbl\\\\ntbl: .incbin \\\\"TABLE\\\\"\\\\n.previous");\\n'
    'extern const unsigned char tbl[];\\n'
    'void f(float *o, int n) { for (int i = 0; i < n; i++) o[i] = tbl[i]; }\\n',
    "f", "Pi",
)

def workload(rt):
    rt.launch(K, rt.buffer(4, "float32"), 4)
"""


def test_a_file_the_kernels_assembly_reads_is_refused(warm: Warm, tmp_path: Path) -> None:
    """`__asm__(".incbin \\"/opt/table.bin\\"")`: the assembler put the file's bytes in the build
    and no key covered them (a rewritten table was served the old one). Refused in one line."""
    table = tmp_path / "table.bin"
    table.write_bytes(bytes([2] * 8))
    workload = tmp_path / "w.py"
    workload.write_text(INCBIN_WORKLOAD.replace("TABLE", str(table)))
    run = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert run.returncode == 2, run.stdout + run.stderr
    assert "its assembly reads a file (.incbin, .include)" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize("spelling", ["--system-include={d}", "--system-include|{d}"])
def test_an_nvcc_system_include_folders_header_is_keyed(
    warm: Warm, tmp_path: Path, spelling: str
) -> None:
    """nvcc's `--system-include` (its long `-isystem`) was not read as an include folder: an
    edited `<cfg.h>` there kept the key, and `warm verify` called the old cubin a hit."""
    nvcc_or_skip()
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "cfg.h").write_text("#define SCALE 2.0f\n")
    options = tuple(spelling.format(d=tmp_path / "inc").split("|"))
    workload = tmp_path / "w.py"
    workload.write_text(
        CUDA_WORKLOAD.replace("OPTIONS", repr(options)).replace(
            "'#ifndef SCALE", "'#include <cfg.h>\\n#ifndef SCALE"
        )
    )
    bundle, args = tmp_path / "b.warm", ("--arch", "sm_90", "--compiler", "nvcc", "-q")
    run = warm("run", workload, "-b", bundle, *args)
    assert run.returncode == 0, run.stdout + run.stderr
    (tmp_path / "inc" / "cfg.h").write_text("#define SCALE 3.0f\n")
    verify = warm("verify", bundle, "--workload", workload, *args)
    assert verify.returncode == 1, verify.stdout + verify.stderr
    assert "headers" in verify.stdout, verify.stdout
