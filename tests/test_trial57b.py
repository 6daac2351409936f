"""Trial 57b: a user's, then an attacker's tries at the host backend's keys (hit == cold).

cc runs in a scratch folder of warm's inside the temporary folder. Include folders and a header
read first from the working folder are given it by their absolute paths, but any other relative
name in a kernel's options is read by cc (or its linker) from that scratch folder: a header read
first that the working folder does not hold (`-include ../cfg.h`: the temporary folder's), one
the source includes by a quoted name (`#include "../cfg.h"`, searched from its folder first, or
`#include CFG` with `-DCFG="../cfg.h"`), a
library folder (`-L..`), a file to link or load (`../helper.o`, `-fplugin=../p.so`), and
`-include base.h`, warm's own file there. No key read them: `warm run` stored the build, and a
production process served it after the file changed, where a cold start built the new one (or,
for `base.h`, built from warm's file, never the kernel's header). Real parts: the real CLI warms
with the real cc, a real production process serves.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Warm, nvcc_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

WORKLOAD = """
import os
from warmcli import Kernel
DEVICE = "host"
HERE = os.path.dirname(os.path.abspath(__file__))
OPTIONS = tuple(o.replace("HERE", HERE) for o in {options!r})
K = Kernel('''{source}''', "k", "P", options=OPTIONS, defines={defines!r})
def workload(rt):
    y = rt.buffer(1, "int32")
    rt.launch(K, y)
    return [y]
"""
DEFAULTED = "#ifndef SCALE\n#define SCALE 2\n#endif\nvoid k(int *y) { y[0] = SCALE; }"
LINKED = "int helper(void);\nvoid k(int *y) { y[0] = helper(); }"
SERVE = """
import json, runpy, sys, warmcli
if len(sys.argv) > 2:
    warmcli.use_bundle(sys.argv[2])
rt = warmcli.runtime("host")
print(json.dumps([int(rt.read(y)[0]) for y in runpy.run_path(sys.argv[1])["workload"](rt)]))
"""


def _archive(folder: Path, value: int) -> None:
    """`folder/libhelper.a`, whose `helper()` returns `value`, built by the real cc and ar."""
    source, obj = folder / "h.c", folder / "h.o"
    source.write_text(f"int helper(void) {{ return {value}; }}\n")
    subprocess.run(["cc", "-O2", "-fPIC", "-c", source, "-o", obj], check=True)
    (folder / "libhelper.a").unlink(missing_ok=True)
    subprocess.run(["ar", "rcs", folder / "libhelper.a", obj], check=True)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temporary folder holding what a kernel's `..` reaches from cc's scratch folder there,
    `cfg.h` (SCALE 3) and `libhelper.a` (`helper()` returns 3): one a module, so the cases
    share one `TMPDIR` and their commands fork from one server (`forked_warm`'s are one an
    environment)."""
    tmp = tmp_path_factory.mktemp("tmp")
    (tmp / "cfg.h").write_text("#define SCALE 3\n")
    _archive(tmp, 3)
    return tmp


def _case(case: str, work: Path) -> tuple[str, tuple[str, ...], str]:
    """The kernel's source and options of `case` (its file `scratch`'s, or, for warm's own
    `base.h`, the working folder `work`'s include folder's, SCALE 3), and how the refusal
    names it."""
    if case == "source include":  # (searched from the source's folder, the scratch one)
        return '#include "../cfg.h"\n' + DEFAULTED, (), '#include "../cfg.h"'
    if case == "computed include":  # `#include CFG`, `-DCFG="../cfg.h"`
        return "#include CFG\n" + DEFAULTED, ('-DCFG="../cfg.h"',), '#include "../cfg.h"'
    if case == "pre-included":
        return DEFAULTED, ("-include", "../cfg.h"), "option '../cfg.h'"
    if case == "library folder":
        return LINKED, ("-L..", "-Wl,-u,helper", "-lhelper"), "option '-L..'"
    if case == "LIBRARY_PATH":  # (set in the test, `LIBRARY_PATH=..`)
        return LINKED, ("-Wl,-u,helper", "-lhelper"), "LIBRARY_PATH's entry '..'"
    (work / "inc").mkdir(exist_ok=True)  # "warm's own": its scratch folder's `base.h`
    (work / "inc" / "base.h").write_text("#define SCALE 3\n")
    return DEFAULTED, ("-IHERE/inc", "-include", "base.h"), "option 'base.h'"


CASES = ["pre-included", "source include", "computed include", "library folder", "warm's own"]
CASES += ["LIBRARY_PATH"]


@pytest.mark.parametrize("case", CASES)
def test_a_relative_name_cc_reads_from_its_scratch_folder_is_refused(
    warm: Warm, tmp_path: Path, scratch: Path, workload_file, case: str
) -> None:
    """A file a kernel's options name relatively that cc would read from its scratch folder
    (`-include ../cfg.h`, `#include "../cfg.h"`, `#include CFG` of `-DCFG="../cfg.h"`, `-L..`
    reaching the temporary folder;
    `-include base.h`, warm's own)
    fails the kernel's compile, naming it, in one line: before, `warm run` stored the build
    (exit 0), and production served it after the file changed (3, where a cold start read 4),
    or built the kernel from warm's `base.h` (2, where cc alone reads the kernel's header: 3)."""
    source, options, named = _case(case, tmp_path)
    path = workload_file(WORKLOAD.format(source=source, options=options, defines={}))
    warm.env["TMPDIR"] = str(scratch)
    if case == "LIBRARY_PATH":
        warm.env["LIBRARY_PATH"] = ".."
    done = warm("run", path, "-b", tmp_path / "b.warm")
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr)
    assert "Traceback" not in done.stderr
    line = next(x for x in done.stderr.splitlines() if "scratch folder" in x)
    assert named in line and "no kernel key covers" in line, done.stderr
    assert not (tmp_path / "b.warm").exists() or "stored 1 new kernel" not in done.stdout


def test_a_relative_name_the_working_folder_holds_is_built_and_served(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """The check refuses nothing else: `-include cfg.h` of the working folder (given cc by its
    path) is built, stored and served, and an edit there is a miss built anew, as cold."""
    (tmp_path / "cfg.h").write_text("#define SCALE 3\n")
    given = {"source": DEFAULTED, "options": ("-include", "cfg.h"), "defines": {}}
    path = workload_file(WORKLOAD.format(**given))
    bundle, serve = tmp_path / "b.warm", workload_file(SERVE, "serve.py")
    done = warm("run", path, "-b", bundle, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (tmp_path / "cfg.h").write_text("#define SCALE 4\n")
    for given in ((), (str(bundle),)):
        served = subprocess.run(
            [sys.executable, serve, path, *given], capture_output=True, text=True,
            env=warm.env, cwd=tmp_path, check=True,
        )  # fmt: skip
        assert served.stdout.strip() == "[4]", served.stderr


CUDA_WORKLOAD = """
from warmcli import Kernel
DEVICE = "cuda"
K = Kernel('''{source}''', "k", "P", language="cuda", options={options!r})
def workload(rt):
    rt.launch(K, rt.buffer(1, "int32"), grid=1, block=1)
"""
CUDA_DEFAULTED = DEFAULTED.replace("void k(", 'extern "C" __global__ void k(')


@pytest.mark.parametrize("case", ["source include", "pre-included"])
def test_nvcc_refuses_a_relative_name_it_reads_from_its_scratch_folder(
    warm: Warm, tmp_path: Path, scratch: Path, workload_file, case: str
) -> None:
    """nvcc runs in a scratch folder too: `#include "../cfg.h"` (and `-include ../cfg.h`, not in
    the working folder) read the temporary folder's cfg.h, unkeyed; a pre-build stored its cubin
    (exit 0) and an edit of cfg.h was served it (`warm run` again: nothing built). Now its
    compile fails in one line naming it."""
    nvcc = nvcc_or_skip()
    include = case == "source include"
    source = '#include "../cfg.h"\n' * include + CUDA_DEFAULTED
    options = () if include else ("-include", "../cfg.h")
    path = workload_file(CUDA_WORKLOAD.format(source=source, options=options))
    warm.env["TMPDIR"] = str(scratch)
    args = ("--arch", "sm_90", "--compiler", "nvcc", "--nvcc", nvcc)
    done = warm("run", path, *args, "-b", tmp_path / "b.warm")
    assert done.returncode == 2, (done.returncode, done.stdout[-2000:], done.stderr)
    assert "Traceback" not in done.stderr
    line = next(x for x in done.stderr.splitlines() if "scratch folder" in x)
    assert "../cfg.h" in line and "no kernel key covers" in line, done.stderr
