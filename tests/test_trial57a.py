"""A CI pre-build with no GPU (`warm run --arch sm_90`) with nvcc: key completeness (trial57a).

Each was a stale hit: a bundle served a build its key did not cover, computing what a cold
build did not. What nvcc hands its gcc (which preprocesses device code) that reads a file
(`-Xcompiler @file`, `-specs=`), ptxas's options file (`-Xptxas -optf,f`), `COMPILER_PATH`'s
`cc1plus`, a relative path nvcc reads from its scratch folder (`NVCC_APPEND_FLAGS=-I..`,
`-ccbin ..`, a source's `#include "../cfg.h"`, for cc too): refused in one line before the
compiler runs. `-Ib -Xcompiler -Ia` (gcc searches `a` first) and NVRTC's toolkit folders read
after a workload set `CUDA_HOME`: keyed as the compiler reads them now.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import Warm, nvcc_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.cuda import host_options

WORKLOAD = """
from warmcli import Kernel

DEVICE = "cuda"
K = Kernel(
    '#ifndef SCALE\\n#define SCALE 2.0f\\n#endif\\n'
    'extern "C" __global__ void scale(float *x, int n) {\\n'
    '    int i = blockIdx.x * blockDim.x + threadIdx.x;\\n'
    '    if (i < n) x[i] *= SCALE;\\n}\\n',
    "scale", "Pi", language="cuda", options=OPTIONS,
)

def workload(rt):
    x = rt.buffer(256, "float32")
    rt.launch(K, x, 256, grid=1, block=256)
"""


NVCC = ("--arch", "sm_90", "--compiler", "nvcc", "-q")  # a pre-build with no GPU, by nvcc


def refused(run_warm: Warm, workload: Path, *said: str, args: tuple[str, ...] = NVCC) -> None:
    """`warm run workload` (into a bundle beside it) fails in one line saying each of `said`:
    exit 2, no traceback."""
    run = run_warm("run", workload, "-b", workload.with_name("b.warm"), *args)
    assert run.returncode == 2, run.stdout + run.stderr
    assert all(part in run.stderr for part in said), run.stderr
    assert "Traceback" not in run.stderr


def test_host_compiler_options_reading_a_file_are_told() -> None:
    """Every spelling nvcc reads (alone after the flag, joined by `=`, split at commas or
    blanks) is found; options reading no file (`-O2,-Wall`, `-fPIC`) are not."""
    found = {
        ("-Xcompiler", "@/opt/o.txt"): "-Xcompiler @/opt/o.txt",
        ("-Xcompiler=@/opt/o.txt",): "-Xcompiler=@/opt/o.txt",
        (
            "--compiler-options",
            "-O2,-specs=/opt/s.specs",
        ): "--compiler-options -O2,-specs=/opt/s.specs",
        ("-Xcompiler", "-Wall --sysroot=/opt/root"): "-Xcompiler -Wall --sysroot=/opt/root",
        ("--compiler-options=-B/opt/bin/",): "--compiler-options=-B/opt/bin/",
    }
    for options, told in found.items():
        assert host_options.unkeyed_host_option(options) == told, options
    for options in (("-Xcompiler", "-O2,-Wall"), ("-Xcompiler", "-fPIC"), ("-O3", "@x")):
        assert host_options.unkeyed_host_option(options) is None, options
    files = ("-optf", "--options-file")
    assert host_options.options_file(("-Xptxas", "-O3,-v", "-optf=f"), files) == "-optf=f"
    assert host_options.options_file(("-Xptxas", "-O3,-v", "--use_fast_math"), files) is None


@pytest.mark.parametrize(
    ("spelling", "variable"),
    [
        ("-Xcompiler|@{d}/o.txt", ""),
        ("-Xcompiler=@{d}/o.txt", ""),
        ("--compiler-options|-specs={d}/s.specs", ""),
        ("-Xcompiler @{d}/o.txt", "NVCC_APPEND_FLAGS"),
        ("-Xcompiler -specs={d}/s.specs", "NVCC_PREPEND_FLAGS"),
    ],
)
def test_nvcc_host_compiler_reading_a_file_is_refused(
    warm: Warm, tmp_path: Path, spelling: str, variable: str
) -> None:
    """`-Xcompiler @o.txt` holding `-DSCALE=3.0f`: a pre-build stored the cubin scaling by 3, and
    after o.txt said 9.0f the next `warm run` over that bundle compiled nothing and kept it (a cold
    build scales by 9). Before the fix the first run exited 0; now it is refused, exit 2, one line
    naming the option (and the variable where one gave it), no traceback."""
    nvcc_or_skip()
    (tmp_path / "o.txt").write_text("-DSCALE=3.0f\n")
    (tmp_path / "s.specs").write_text("*cpp:\n+ -DSCALE=3.0f\n\n")
    run_warm, workload = _given(warm, tmp_path, spelling, variable)
    told = f"{variable}'s option" if variable else "option '-"
    refused(run_warm, workload, "hands nvcc's host compiler an option reading a file", told)


def _given(warm: Warm, tmp_path: Path, spelling: str, variable: str) -> tuple[Warm, Path]:
    """The workload and the `warm` giving nvcc `spelling` (`|` between options): as the
    kernel's options, or in the environment variable `variable` where one is named."""
    given = spelling.format(d=tmp_path)
    options = () if variable else tuple(given.split("|"))
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD.replace("OPTIONS", repr(options)))
    return (warm.with_env(**{variable: given}) if variable else warm), workload


@pytest.mark.parametrize(
    ("spelling", "variable"),
    [
        ("-Xptxas|-optf,{d}/p.txt", ""),
        ("--ptxas-options=--options-file={d}/p.txt", ""),
        ("-Xptxas=-O3,-optf={d}/p.txt", ""),
        ("-Xptxas -optf,{d}/p.txt", "NVCC_APPEND_FLAGS"),
    ],
)
def test_nvcc_ptxas_options_file_is_refused(
    warm: Warm, tmp_path: Path, spelling: str, variable: str
) -> None:
    """`-Xptxas -optf,p.txt` holding `-O3`: ptxas read options from a file no key covers, and
    after p.txt said `-O0` the next `warm run` over that bundle compiled nothing and kept the
    `-O3` cubin (a cold build differs). Only `-Xptxas --options-file=f`, an option of its own, was
    refused, as nvcc's own. Before the fix the first run exited 0; now exit 2, one line."""
    nvcc_or_skip()
    (tmp_path / "p.txt").write_text("-O3\n")
    run_warm, workload = _given(warm, tmp_path, spelling, variable)
    refused(run_warm, workload, "reads options from a file, which no kernel key covers")


@pytest.mark.parametrize("variable", ["COMPILER_PATH", "GCC_EXEC_PREFIX"])
def test_nvcc_host_compiler_programs_moved_are_refused(
    warm: Warm, tmp_path: Path, variable: str
) -> None:
    """nvcc's gcc runs the `cc1plus` it finds in `COMPILER_PATH` (or under `GCC_EXEC_PREFIX`,
    which moves gcc's own headers too) to preprocess device code: one there adding
    `-DSCALE=3.0f`, replaced by one adding 9.0f, was served the 3.0f cubin (a cold build: 9.0f),
    as nvcc's identity names only gcc's version line (a host kernel's keys those programs).
    Before the fix the first run exited 0; now exit 2, one line naming the variable."""
    nvcc_or_skip()
    folder = tmp_path / "programs"
    folder.mkdir()
    cc1plus = folder / "cc1plus"
    real = subprocess.run(["gcc", "-print-prog-name=cc1plus"], capture_output=True, text=True)
    cc1plus.write_text(f'#!/bin/sh\nexec {real.stdout.strip()} -DSCALE=3.0f "$@"\n')
    cc1plus.chmod(0o755)
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD.replace("OPTIONS", "()"))
    moved = warm.with_env(**{variable: f"{folder}/"})
    refused(moved, workload, f"{variable} is set in the environment")
    plain = warm("run", workload, "-b", tmp_path / "b.warm", *NVCC)  # unset: built as before
    assert plain.returncode == 0, plain.stdout + plain.stderr


def test_nvcc_searches_host_compiler_include_folders_first(warm: Warm, tmp_path: Path) -> None:
    """`options=("-Ib", "-Xcompiler", "-Ia")`, a `cfg.h` in each: nvcc puts what it hands its
    gcc before its own `-I`s (`nvcc --dryrun`: `gcc ... -Ia ... -Ib`), so device code read
    `a/cfg.h`, while the key searched in the options' order and hashed `b/cfg.h`: an edit to
    `a/cfg.h` (SCALE 3.0f to 7.0f) was served the old cubin (compiled 0; a cold build: 7.0f).
    Before the fix the second run compiled nothing; now it builds the edited kernel."""
    nvcc_or_skip()
    for folder, scale in (("a", "3.0f"), ("b", "4.0f")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "cfg.h").write_text(f"#define SCALE {scale}\n")
    options = (f"-I{tmp_path / 'b'}", "-Xcompiler", f"-I{tmp_path / 'a'}")
    source = WORKLOAD.replace("'#ifndef SCALE", '\'#include "cfg.h"\\n#ifndef SCALE')
    workload = tmp_path / "w.py"
    workload.write_text(source.replace("OPTIONS", repr(options)))
    args = (*NVCC[:-1], "--no-ptx", "--json")
    first = warm("run", workload, "-b", tmp_path / "b.warm", *args)
    assert first.returncode == 0, first.stdout + first.stderr
    (tmp_path / "a" / "cfg.h").write_text("#define SCALE 7.0f\n")
    again = warm.json("run", workload, "-b", tmp_path / "b.warm", *args[:-1])
    assert sum(p["compilation"]["compiled"] for p in again["passes"]) == 1, again["passes"]


TOOLKIT_WORKLOAD = """
import os
from warmcli import Kernel

DEVICE = "cuda"
K = Kernel(
    '#include <mylib.h>\\n'
    'extern "C" __global__ void scale(float *x, int n) {\\n'
    '    int i = threadIdx.x;\\n    if (i < n) x[i] *= SCALE;\\n}\\n',
    "scale", "Pi", language="cuda",
)

def workload(rt):
    if os.environ.get("SWITCH_TO"):  # a workload picking its toolkit itself
        os.environ["CUDA_HOME"] = os.environ["SWITCH_TO"]
    x = rt.buffer(256, "float32")
    rt.launch(K, x, 256, grid=1, block=256)
"""


def test_nvrtc_builds_from_the_toolkit_its_key_read(warm: Warm, tmp_path: Path) -> None:
    """Two toolkits whose `include/mylib.h` say SCALE 5.0f (`tk0`) and 3.0f (`tk1`); `warm run`
    started under `CUDA_HOME=tk0` whose workload sets `CUDA_HOME=tk1` before its launch: the key
    read `tk1`'s header (NVRTC's folders read once a process, at the first key) but NVRTC was
    given `tk0`'s (read when the compiler was made, before the workload ran), so the row held
    the 5.0f cubin under the key of the 3.0f source: a process under `CUDA_HOME=tk1` was served
    it where a cold build computes 3.0f. Before the fix that row's bytes differed from a cold
    build's under the same key; now the key and the build read the same folders."""
    from conftest import nvrtc_release_or_skip

    nvrtc_release_or_skip()
    import sqlite3

    homes = {}
    for name, scale in (("tk0", "5.0f"), ("tk1", "3.0f")):
        (tmp_path / name / "include").mkdir(parents=True)
        (tmp_path / name / "include" / "cuda_runtime_api.h").write_text("/* a toolkit */\n")
        (tmp_path / name / "include" / "mylib.h").write_text(f"#define SCALE {scale}\n")
        homes[name] = str(tmp_path / name)
    workload = tmp_path / "w.py"
    workload.write_text(TOOLKIT_WORKLOAD)
    warm = Warm(warm.env)  # started, not forked: NVRTC's folders are read once a process
    args = ("--arch", "sm_90", "--compiler", "nvrtc", "--no-ptx", "-q")
    switching = warm.with_env(CUDA_HOME=homes["tk0"], SWITCH_TO=homes["tk1"])
    done = switching("run", workload, "-b", tmp_path / "b.warm", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    plain = warm.with_env(CUDA_HOME=homes["tk1"])
    for bundle in ("b.warm", "cold.warm"):  # over the first's rows, then cold
        done = plain("run", workload, "-b", tmp_path / bundle, *args)
        assert done.returncode == 0, done.stdout + done.stderr

    def rows(bundle: str) -> dict[str, str]:
        with sqlite3.connect(tmp_path / bundle) as db:
            return dict(db.execute("SELECT key, sha256 FROM kernels"))

    warmed, cold = rows("b.warm"), rows("cold.warm")
    assert cold and all(warmed.get(key, sha) == sha for key, sha in cold.items()), (warmed, cold)


@pytest.mark.parametrize("flags", ["-I..", "-include ../cfg.h", "-isystem ..", "-I inc"])
def test_nvcc_flags_naming_a_relative_path_are_refused(
    warm: Warm, tmp_path: Path, flags: str
) -> None:
    """`NVCC_APPEND_FLAGS=-I..`: nvcc reads it in its scratch folder, so `..` is the temporary
    folder, while the key read the working folder's `..`: a `cfg.h` in the temporary folder
    (anyone's, in /tmp) built the cubin and an edit there was served the old build (compiled 0;
    a cold build differs). Before the fix the run exited 0; now exit 2, one line naming it."""
    nvcc_or_skip()
    scratch = tmp_path / "tmp"
    (scratch / "inc").mkdir(parents=True)
    for header in (scratch / "cfg.h", scratch / "inc" / "cfg.h"):
        header.write_text("#define SCALE 3.0f\n")
    source = WORKLOAD.replace("'#ifndef SCALE", "'#include <cfg.h>\\n#ifndef SCALE")
    workload = tmp_path / "w.py"
    workload.write_text(source.replace("OPTIONS", "()"))
    moved = warm.with_env(NVCC_APPEND_FLAGS=flags, TMPDIR=str(scratch))
    refused(moved, workload, "NVCC_APPEND_FLAGS's option", "by its absolute path")


@pytest.mark.parametrize(
    ("options", "variable"),
    [(("-ccbin", ".."), ""), (("--compiler-bindir=../gcc",), ""), ((), "NVCC_CCBIN")],
)
def test_nvcc_host_compiler_by_a_relative_path_is_refused(
    warm: Warm, tmp_path: Path, options: tuple[str, ...], variable: str
) -> None:
    """`-ccbin ..` (or `NVCC_CCBIN=..`): nvcc, run in its scratch folder, ran the `gcc` in the
    temporary folder (anyone's, in /tmp), which the key never read (it looked beside the working
    folder): a wrapper there adding `-DSCALE=3.0f`, edited to 9.0f, was served the old cubin.
    Before the fix the run exited 0; now exit 2, one line naming it."""
    nvcc_or_skip()
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    for name in ("gcc", "g++"):
        real = shutil.which(name) or name  # (never run: refused first)
        (scratch / name).write_text(f'#!/bin/sh\nexec {real} -DSCALE=3.0f "$@"\n')
        (scratch / name).chmod(0o755)
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD.replace("OPTIONS", repr(options)))
    moved = warm.with_env(TMPDIR=str(scratch), **({variable: ".."} if variable else {}))
    refused(moved, workload, "host compiler by a relative path")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temporary folder holding a `cfg.h` (SCALE 3) a compile of `../cfg.h` would read,
    one a module: the cases given it share one `TMPDIR`, so their commands fork from one
    server (`forked_warm`'s are one an environment)."""
    (scratch := tmp_path_factory.mktemp("tmp")).joinpath("cfg.h").write_text("#define SCALE 3\n")
    return scratch


HOST_WORKLOAD = """
from warmcli import Kernel

DEVICE = "host"
K = Kernel(SOURCE, "f", "Pi", options=OPTIONS)

def workload(rt):
    x = rt.buffer(4, "float32")
    rt.launch(K, x, 4)
"""


@pytest.mark.parametrize(
    ("device", "include", "options"),
    [
        ("host", '#include "../cfg.h"', ()),
        ("host", "", ("-include", "../cfg.h")),
        ("cuda", '#include "../cfg.h"', ()),
        ("cuda", "", ("--pre-include=../cfg.h",)),
    ],
)
def test_a_header_above_the_scratch_folder_is_refused(
    warm: Warm, tmp_path: Path, scratch: Path, device: str, include: str, options: tuple[str, ...]
) -> None:
    """cc and nvcc read a kernel's source in a scratch folder in the temporary folder, so its
    `#include "../cfg.h"` (or `-include ../cfg.h`, which the working folder lacks) was the
    temporary folder's (anyone's, in /tmp), a file no key read: a `cfg.h` there saying 3,
    edited to 9, was served the old build (compiled 0; a cold build: 9). Before the fix the
    first run exited 0; now exit 2, one line naming the include (NVRTC already refused it)."""
    if device == "cuda":
        nvcc_or_skip()
    if device == "host":
        source = (
            f"{include}\nvoid f(float *x, int n) {{ for (int i = 0; i < n; i++) x[i] = SCALE; }}\n"
        )
        text = HOST_WORKLOAD.replace("SOURCE", repr(source))
        args: tuple[str, ...] = ("-q",)
    else:
        text = WORKLOAD.replace("'#ifndef SCALE", repr(include + "\n") + " '#ifndef SCALE")
        args = NVCC
    workload = tmp_path / "w.py"
    workload.write_text(text.replace("OPTIONS", repr(options)))
    moved = warm.with_env(TMPDIR=str(scratch))
    named = include or "option '../cfg.h'"  # (`#include "../cfg.h"`, or the header read first)
    refused(moved, workload, named, "its scratch folder, or above it", args=args)
