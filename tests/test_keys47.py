"""Stop 47 (keys47): two stale serves review47a found, each a header the compiler reads that
no key covered.

- nvcc reads `NVCC_PREPEND_FLAGS` and `NVCC_APPEND_FLAGS` as options before and after every
  command line's: an include folder named there (`-I`, `--include-path`, `-isystem`) or a
  header read first (`-include`, `--pre-include`) was keyed by its path's text alone (in nvcc's
  identity), never by the headers read there: `inc/own.h` edited, the same key, another cubin.
  Those options are now searched and keyed as the kernel's own (PREPEND's before, APPEND's
  after).
- A host kernel's `-I` naming one of cc's own system folders (`-I/usr/include -Iinc`): gcc
  drops such a folder ("ignoring duplicate directory"), so `<stdlib.h>` is `inc/stdlib.h`
  (or `/usr/include/stdlib.h` reads `inc/features.h`), while the key followed
  `/usr/include/stdlib.h` as the kernel's header: the same key, another binary.
  `headers.search_orders` now leaves a `-I`, `-iquote` (or `CPATH` entry) that is one of the
  compiler's system folders out, as gcc does.

Real nvcc and gcc, each key (and binary) made in a process of its own: nvcc's identity and
`CPATH` are read once a process (each a fork of one that imported numpy and warmcli once, and
read none of the variables a test sets: `tests/forked_tool_env.py`, checked here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, nvcc_or_skip
from forked_tool_env import TOOL_VARIABLES, ToolEnvPythons

CUDA_SOURCE = '#include "own.h"\nextern "C" __global__ void k(int *o) { o[0] = OWN; }\n'
NVCC_KEY = """
import hashlib, json, sys
from warmcli import Kernel
from warmcli.backends.compiler import CompileUnit
from warmcli.backends.cuda.nvcc import NvccCompiler
from warmcli.kernel import kernel_key
compiler = NvccCompiler()
identity = compiler.toolchain.identity
kernel = Kernel(sys.argv[1], "k", "P", language="cuda", options=tuple(json.loads(sys.argv[2])))
key = kernel_key(kernel, "sm_90", identity)
built = ""
if sys.argv[3] == "build":
    built = compiler.compile_group([CompileUnit(key, kernel, "sm_90")]).binary
    built = hashlib.sha256(built).hexdigest()
print(json.dumps([key, built]))
"""
HOST_KEY = """
import hashlib, json, sys
from warmcli import Kernel
from warmcli.backends.compiler import CompileUnit
from warmcli.backends.host.compiler import HostCompiler
from warmcli.kernel import kernel_key
compiler = HostCompiler()
identity = compiler.toolchain.identity
kernel = Kernel(sys.argv[1], "f", "P", options=tuple(json.loads(sys.argv[2])))
key = kernel_key(kernel, "x86_64", identity)
built = ""
if sys.argv[3] == "build":
    built = hashlib.sha256(compiler.compile_group([CompileUnit(key, kernel, "x86_64")]).binary)
    built = built.hexdigest()
print(json.dumps([key, built]))
"""
_DROPPED = ("CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "NVCC_PREPEND_FLAGS")
_DROPPED += ("NVCC_APPEND_FLAGS", "NVCC_CCBIN")


_python = ToolEnvPythons(ROOT)  # this module's forking server (one: its tests set tool variables)


@pytest.fixture(scope="module", autouse=True)
def _servers() -> Iterator[None]:
    """`_python`'s server, ended with the module."""
    yield
    _python.close()


def _process(
    script: str, source: str, options: list[str], env: dict[str, str], cwd: Path, build: bool
) -> subprocess.CompletedProcess[str]:
    """`script` run on the kernel in a process of its own (forked, `_python`)."""
    run_env = {k: v for k, v in os.environ.items() if k not in _DROPPED}
    run_env.update(env, WARM_HOME=str(cwd / "home"), PYTHONPATH=str(ROOT))
    args = (source, json.dumps(options), "build" if build else "")
    return _python.run(script, *args, env=run_env, cwd=cwd, timeout=120)  # type: ignore[no-any-return]


def _key(
    script: str,
    source: str,
    options: list[str],
    env: dict[str, str],
    cwd: Path,
    build: bool = False,
) -> tuple[str, str]:
    """The kernel's key (and its binary's sha256 where `build`), in a process of its own."""
    done = _process(script, source, options, env, cwd, build)
    assert done.returncode == 0, done.stderr[-2000:]
    key, built = json.loads(done.stdout)
    return key, built


# What a forking server's imports read of the environment, and whether they chose tempfile's
# folder: run in a fresh process, as a server starts.
READS = """
import json, os, sys
seen = set()
kind = type(os.environ)
get, has = kind.__getitem__, kind.__contains__
kind.__getitem__ = lambda self, k: (seen.add(k), get(self, k))[1]
kind.__contains__ = lambda self, k: (seen.add(k), has(self, k))[1]
import numpy, warmcli, warmcli.cli
sys.modules["warmcli.cli.app"].app.load([])
import tempfile
print(json.dumps({"read": sorted(seen), "tempdir": tempfile.tempdir}))
"""


def test_a_servers_imports_read_no_free_variable(tmp_path: Path) -> None:
    """`tests/forked_tool_env.py`'s premise: a forking server's imports (numpy, warmcli, the
    CLI and every command it loads) read none of the variables its children set apart."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", READS], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert "NPY_PROMOTION_STATE" in found["read"], found  # (what it reads is seen)
    own = {"W", "R", "CHECK", "PLUS", "BY_CFG", "EXTRA_CFLAGS"}  # (what modules name free,
    own |= {"MARK", "STOP", "CHILD_RAISES", "SLEEP", "AWS_ENDPOINT_URL"}  # `forked_tool_warm`'s)
    assert not set(found["read"]) & {*TOOL_VARIABLES, *own}, found
    assert found["tempdir"] is None, found


@pytest.mark.nvcc
def test_an_include_folder_in_nvcc_append_flags_is_keyed_by_its_headers(tmp_path: Path) -> None:
    """The brief's repro: `NVCC_APPEND_FLAGS=-I$PWD/inc`, `inc/own.h` edited: another cubin,
    and now another key."""
    nvcc_or_skip()
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "own.h").write_text("#define OWN 1\n")
    env = {"NVCC_APPEND_FLAGS": f"-I{inc}"}
    before = _key(NVCC_KEY, CUDA_SOURCE, [], env, tmp_path, build=True)
    (inc / "own.h").write_text("#define OWN 2\n")
    after = _key(NVCC_KEY, CUDA_SOURCE, [], env, tmp_path, build=True)
    assert before[1] != after[1]  # nvcc read the edit
    assert before[0] != after[0]


@pytest.mark.nvcc
@pytest.mark.parametrize(
    ("variable", "spelled"),
    [
        ("NVCC_PREPEND_FLAGS", "--include-path {inc}"),
        ("NVCC_APPEND_FLAGS", "-isystem {inc}"),
    ],
)
def test_each_spelling_of_an_include_folder_in_either_variable_is_keyed(
    tmp_path: Path, variable: str, spelled: str
) -> None:
    nvcc_or_skip()
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "own.h").write_text("#define OWN 1\n")
    env = {variable: "-lineinfo " + spelled.format(inc=inc)}
    before = _key(NVCC_KEY, CUDA_SOURCE, [], env, tmp_path)
    (inc / "own.h").write_text("#define OWN 2\n")
    assert _key(NVCC_KEY, CUDA_SOURCE, [], env, tmp_path)[0] != before[0]


@pytest.mark.nvcc
def test_a_quoted_folder_with_a_blank_in_nvcc_append_flags_is_keyed(tmp_path: Path) -> None:
    """nvcc parts its variables' words at blanks outside double quotes and drops the quotes
    from a path (`-I"/opt/my inc"`): split at every blank, the key named no such folder."""
    nvcc_or_skip()
    inc = tmp_path / "my inc"
    inc.mkdir()
    (inc / "own.h").write_text("#define OWN 1\n")
    env = {"NVCC_APPEND_FLAGS": f'-DQ="a b" -I"{inc}"'}
    before = _key(NVCC_KEY, CUDA_SOURCE, [], env, tmp_path, build=True)
    (inc / "own.h").write_text("#define OWN 2\n")
    after = _key(NVCC_KEY, CUDA_SOURCE, [], env, tmp_path, build=True)
    assert before[1] != after[1]
    assert before[0] != after[0]


@pytest.mark.nvcc
def test_a_header_nvcc_append_flags_reads_first_is_keyed_by_its_content(tmp_path: Path) -> None:
    """`NVCC_APPEND_FLAGS=-include /abs/cfg.h`: the kernel includes nothing, nvcc reads it."""
    nvcc_or_skip()
    cfg = tmp_path / "cfg.h"
    cfg.write_text("#define OWN 1\n")
    source = CUDA_SOURCE.split("\n", 1)[1]
    env = {"NVCC_APPEND_FLAGS": f"--pre-include {cfg}"}
    before = _key(NVCC_KEY, source, [], env, tmp_path, build=True)
    cfg.write_text("#define OWN 2\n")
    after = _key(NVCC_KEY, source, [], env, tmp_path, build=True)
    assert before[1] != after[1]
    assert before[0] != after[0]


@pytest.mark.nvcc
def test_a_define_in_nvcc_append_flags_already_changes_the_key(tmp_path: Path) -> None:
    nvcc_or_skip()
    source = CUDA_SOURCE.split("\n", 1)[1]
    one = _key(NVCC_KEY, source, [], {"NVCC_APPEND_FLAGS": "-DOWN=1"}, tmp_path)
    two = _key(NVCC_KEY, source, [], {"NVCC_APPEND_FLAGS": "-DOWN=2"}, tmp_path)
    assert one[0] != two[0]


def _shadowing(tmp_path: Path, header: str) -> tuple[Path, str]:
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / header).write_text(f"#define SHADOW 1\n#include_next <{header}>\n")
    source = (
        "#include <stdlib.h>\n#ifndef SHADOW\n#define SHADOW 0\n#endif\n"
        "void f(float *x) { x[0] = SHADOW; }\n"
    )
    return inc, source


@pytest.mark.parametrize("header", ["stdlib.h", "features.h"])
def test_a_host_kernels_dash_i_of_ccs_own_folder_does_not_hide_a_later_ones_header(
    tmp_path: Path, header: str
) -> None:
    """`-I/usr/include -Iinc`: gcc drops the first, so `inc/<header>` is read (`stdlib.h`
    directly, `features.h` through `/usr/include/stdlib.h`); edited, another key."""
    if not Path("/usr/include/stdlib.h").is_file():
        pytest.skip("no /usr/include/stdlib.h")
    inc, source = _shadowing(tmp_path, header)
    options = ["-I/usr/include", f"-I{inc}"]
    before = _key(HOST_KEY, source, options, {}, tmp_path, build=True)
    (inc / header).write_text(f"#define SHADOW 2\n#include_next <{header}>\n")
    after = _key(HOST_KEY, source, options, {}, tmp_path, build=True)
    assert before[1] != after[1]  # cc read the edit
    assert before[0] != after[0]


@pytest.mark.nvcc
def test_a_wrapper_script_named_by_ccbin_in_nvcc_append_flags_is_keyed(tmp_path: Path) -> None:
    """`NVCC_APPEND_FLAGS=-ccbin /wrap/gcc`, a script adding `-DOWN=1`, edited to `-DOWN=2`:
    another cubin, so another key (as for `NVCC_CCBIN` and a kernel's `-ccbin`)."""
    nvcc_or_skip()
    wrap = tmp_path / "wrap"
    wrap.mkdir()
    gcc = wrap / "gcc"
    gcc.write_text('#!/bin/sh\nexec gcc -DOWN=1 "$@"\n')
    gcc.chmod(0o755)
    source = CUDA_SOURCE.split("\n", 1)[1]
    env = {"NVCC_APPEND_FLAGS": f"-ccbin {gcc}"}
    before = _key(NVCC_KEY, source, [], env, tmp_path, build=True)
    gcc.write_text('#!/bin/sh\nexec gcc -DOWN=2 "$@"\n')
    after = _key(NVCC_KEY, source, [], env, tmp_path, build=True)
    assert before[1] != after[1]
    assert before[0] != after[0]


def test_a_cpath_entry_of_ccs_own_folder_does_not_hide_a_later_ones_header(
    tmp_path: Path,
) -> None:
    """`CPATH=/usr/include:inc` (gcc drops `/usr/include` there too): key only."""
    if not Path("/usr/include/stdlib.h").is_file():
        pytest.skip("no /usr/include/stdlib.h")
    inc, source = _shadowing(tmp_path, "stdlib.h")
    env = {"CPATH": f"/usr/include{os.pathsep}{inc}"}
    before = _key(HOST_KEY, source, [], env, tmp_path)
    (inc / "stdlib.h").write_text("#define SHADOW 2\n#include_next <stdlib.h>\n")
    assert _key(HOST_KEY, source, [], env, tmp_path)[0] != before[0]


def test_search_orders_drop_only_a_folder_that_is_one_of_the_compilers_own(
    tmp_path: Path,
) -> None:
    """Pure logic over real folders: a kernel's folders that are none of the compiler's own
    are searched as before; `-I/usr/include` (and an `-idirafter` of one) is left out."""
    from warmcli.headers import search_orders

    inc = tmp_path / "inc"
    inc.mkdir()
    own = ("/usr/include", "/usr/local/include")
    options = [f"-I{inc}", "-iquote", str(tmp_path), "-isystem", "/usr/include"]
    plain = search_orders(options, str(tmp_path))
    assert search_orders(options, str(tmp_path), standard=own) == plain  # -isystem kept, first
    dropped = ["-I/usr/include", f"-I{inc}", "-iquote/usr/include", "-idirafter/usr/include"]
    assert search_orders(dropped, str(tmp_path), standard=own) == ([str(inc)], [str(inc)])


@pytest.mark.nvcc
@pytest.mark.parametrize(
    ("spelled", "said"),
    [
        ("-Xcompiler=-I{inc}", "hands nvcc's host compiler an include folder"),
        ("--options-file {inc}/opts", "reads options from a file"),
    ],
)
def test_what_nvcc_flags_hide_from_the_key_is_refused(
    tmp_path: Path, spelled: str, said: str
) -> None:
    """`-Xcompiler=-Idir` (or `--options-file`) in `NVCC_APPEND_FLAGS`: nvcc's gcc reads the
    folder, which no key reads (an edit was served the old build): refused, as in options."""
    nvcc_or_skip()
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "own.h").write_text("#define OWN 1\n")
    (inc / "opts").write_text(f"-I{inc}\n")
    env = {"NVCC_APPEND_FLAGS": spelled.format(inc=inc)}
    done = _process(NVCC_KEY, CUDA_SOURCE, [], env, tmp_path, build=True)
    assert done.returncode != 0
    assert f"NVCC_APPEND_FLAGS's option {spelled.format(inc=inc).split()[0]!r}" in done.stderr
    assert said in done.stderr
