"""Stop 46's warm (commit ee7fae5, what users run now) beside today's over one home and bundle.

Today's merges touched keys and identities: headers a kernel's `-I` folder shadows under nvcc's
or NVRTC's own, the host identity remembered whole in `toolchains.json` (speed47), version lines
over 1,024 characters named by their length and digest (hostile47), a `.gch` hashed not scanned
and a linked binary's verdict kept by stamp (gch47). A host kernel with and without `-I`, one
beside a real `.gch`, one linking an `-l` archive, a tune, and NVRTC kernels with and without
`-I`, warmed by each warm in its own home, have the same kernel and tune keys; with one home
shared, alternately, each warm's production serves the other's bundle under `WARM_STRICT=1`
with a cold start's results, neither runs a compiler (a logging `cc` first on `PATH`) nor
rewrites `toolchains.json`. A compiler whose version line is over 1,024 characters: stop 46
remembered the whole line, which today's believed (it remembers its length and digest), so
today's keys in a home stop 46 had used were not today's elsewhere (its bundle a miss there):
such a line is read again now, remembered as today's, and stop 46 then reads today's. nvcc
kernels with and without `-I`, with `CPATH` set, key alike; under `NVCC_APPEND_FLAGS` or
`NVCC_PREPEND_FLAGS` naming an include folder a kernel of no folder of its own keys anew, as
README says (since warm 47 nvcc's implied `cuda_runtime.h` is looked for there). Real
CLI processes (forked, `tests/forked_cli.py`), real production processes (forked, each key's
too: `tests/forked_tool_env.py`), real SQLite files,
the system C compiler and NVRTC; nothing here is a fake. Stop 46's warm is `/tmp/base46` where
one is, else a `git worktree` of ee7fae5 made for the module; skipped where neither can be had.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, nvcc_or_skip
from forked_cli import Servers
from forked_tool_env import ToolEnvPythons
from test_upgrade42 import _ForkedFleet
from upgrades import STORED, Fleet, keys, release, stored

BASE = "ee7fae5"
CHECKOUT = Path("/tmp/base46")
WORKLOAD = """
import os
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
HERE = os.path.dirname(os.path.abspath(__file__))
LOOP = "(float *y, int n) { for (int i = 0; i < n; i++) "
PLAIN = Kernel("void zero" + LOOP + "y[i] = 0.5f; }", "zero", "Pi")
INC = Kernel('#include "val.h"\\nvoid inc' + LOOP + "y[i] += VAL; }", "inc", "Pi",
             options=(f"-I{HERE}/inc", "-O2"))
GCH = Kernel('#include "gv.h"\\nvoid gch' + LOOP + "y[i] += GV; }", "gch", "Pi",
             options=(f"-I{HERE}/ginc",))
LIB = Kernel("float helpv(float);\\nvoid lib" + LOOP + "y[i] = helpv(y[i]); }", "lib", "Pi",
             options=(f"-L{HERE}/lib", "-Wl,-u,helpv", "-lhelp"))
SRC = "void axpy(const float *x, float *y, int n) { for (int i = 0; i < n; i++) y[i] += A * x[i]; }"
AXPY = Tunable("axpy", {f"a{a}": Kernel(SRC, "axpy", "PPi", defines={"A": a}) for a in (2, 3)},
               lambda rt, k, *args, stream=None: rt.launch(k, *args), check="a2")
def workload(rt):
    x = rt.upload(np.arange(64, dtype=np.float32))
    y = rt.buffer(64, "float32")
    for k in (PLAIN, INC, GCH, LIB):
        rt.launch(k, y, 64)
    rt.tune(AXPY, x, y, 64)
    return [y]
"""
CUDA = """
import os
from warmcli import Kernel
DEVICE = "cuda"
HERE = os.path.dirname(os.path.abspath(__file__))
P = Kernel('extern "C" __global__ void p(int *o) { o[0] = 1; }', "p", "P", language="cuda")
I = Kernel('#include "cv.h"\\nextern "C" __global__ void i(int *o) { o[0] = CV; }', "i", "P",
           language="cuda", options=(f"-I{HERE}/cinc",))
def workload(rt):
    for k in (P, I):
        rt.launch(k, rt.buffer(4), grid=1, block=1)
"""
# A compiler binary (no script: remembered by its stamp) logging each run, then running cc.
LOGGING = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    const char *log = getenv("CC_LOG");
    FILE *f = log ? fopen(log, "a") : NULL;
    if (f) { fprintf(f, "%s\n", argc > 1 ? argv[1] : ""); fclose(f); }
    if (LONG && argc == 2 && !strcmp(argv[1], "--version")) {
        printf("cc (Long) 12.2.0 ");
        for (int i = 0; i < 1100; i++) putchar('y');
        printf("\nCopyright\n");
        return 0;
    }
    argv[0] = "/usr/bin/cc";
    execv("/usr/bin/cc", argv);
    return 127;
}
"""


@pytest.fixture(scope="module")
def old() -> Iterator[Path]:
    """Stop 46's warm: `/tmp/base46`, else a worktree of ee7fae5 made for this module."""
    yield from release(BASE, CHECKOUT)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[Servers]:
    servers = Servers(tmp_path)
    yield servers
    servers.close()


@pytest.fixture
def fleet(servers: Servers, old: Path) -> Iterator[_ForkedFleet]:
    """Both warms over `tmp_path`, each command and production process a fork of a process
    that imported that warm once (`test_upgrade42`'s)."""
    f = _ForkedFleet(servers.root, old, servers)
    yield f
    f.close()


@pytest.fixture(scope="module")
def compilers(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, str]:
    """Folders holding a logging `cc`, by whether its version line is 1,118 characters long:
    settled (warm remembers no binary changed in the last 2 s)."""
    made = tmp_path_factory.mktemp("compilers")
    (made / "cc.c").write_text(LOGGING)
    folders = {}
    for long in (False, True):
        folders[long] = str(made / f"long{int(long)}")
        os.mkdir(folders[long])
        out = os.path.join(folders[long], "cc")
        subprocess.run(["cc", f"-DLONG={int(long)}", "-o", out, str(made / "cc.c")], check=True)
    time.sleep(2.1)
    return folders


def _fleet(f: Fleet, compilers: str) -> dict[str, str]:
    """`f`'s workloads and headers written, a `.gch` and an `-l` archive made; the environment
    putting the `cc` of `compilers` first on `PATH`, logging its runs in `cc.log`."""
    folder = f.folder
    for name, text in (("inc/val.h", '#include "sub.h"\n#define VAL (SUB + 1.0f)\n'),
                       ("inc/sub.h", "#define SUB 2.0f\n"), ("ginc/gv.h", "#define GV 3.0f\n"),
                       ("cinc/cv.h", "#define CV 5\n"),
                       ("lib/help.c", "float helpv(float x) { return x * 7.0f; }\n")):  # fmt: skip
        (folder / name).parent.mkdir(exist_ok=True)
        (folder / name).write_text(text)
    run = {"cwd": folder, "check": True}
    subprocess.run(["cc", "-x", "c-header", "ginc/gv.h", "-o", "ginc/gv.h.gch"], **run)  # type: ignore[call-overload]
    subprocess.run(["cc", "-O2", "-fPIC", "-c", "lib/help.c", "-o", "lib/help.o"], **run)  # type: ignore[call-overload]
    subprocess.run(["ar", "rcs", "lib/libhelp.a", "lib/help.o"], **run)  # type: ignore[call-overload]
    f.workload.write_text(WORKLOAD)
    f.cuda.write_text(CUDA)
    return {
        "PATH": f"{compilers}{os.pathsep}{os.environ['PATH']}",
        "CC_LOG": str(folder / "cc.log"),
    }


def _stamp(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_ino, st.st_mtime_ns


def test_keys_alike_and_a_shared_home_hot_for_both(
    fleet: _ForkedFleet, compilers: dict[bool, str]
) -> None:
    """Stop 46 in the home then shared, today's in its own: the same kernel and tune keys.
    Today's re-warm of stop 46's bundle in the shared home stores nothing; then each serves the
    other's bundle strictly, a cold start's bits, running no compiler, and the third of three
    alternations writes nothing to `toolchains.json` (one write seen once in ~15 runs under a
    load of 11, in the second: a file rewritten every process is what this tells)."""
    f, env = fleet, _fleet(fleet, compilers[False])
    bundles = {name: f.folder / f"{name}.warm" for name in ("old", "new")}
    for code, name, home in ((f.old, "old", "home"), (f.new, "new", "home-new")):
        done = f.warm(code, bundles[name], WARM_HOME=str(f.folder / home), **env)
        assert done == [STORED.format(bundles[name], 6, 1), STORED.format(bundles[name], 4, 0)]
    assert keys(bundles["old"]) == keys(bundles["new"])
    done = stored(f.ok(f.new, "run", f.workload, "-b", bundles["old"], "-q", **env))
    assert done == STORED.format(bundles["old"], 0, 0)
    cold = f.serve(f.new, None, WARM_HOME=str(f.folder / "cold"), **env)
    assert cold["compiled"] == 6 and cold["tuned"] == ["axpy"], cold
    remembered, log = f.folder / "home" / "toolchains.json", f.folder / "cc.log"
    log.write_text("")
    stamps = []
    for _ in range(3):
        for code, bundle in ((f.old, bundles["new"]), (f.new, bundles["old"])):
            done = f.serve(code, bundle, WARM_STRICT="1", **env)
            assert done == dict(cold, compiled=0, tuned=[]), (code, bundle)
        stamps.append(_stamp(remembered))
    assert log.read_text() == "", "a hot start ran cc"
    assert stamps[-1] == stamps[-2], "toolchains.json rewritten by a hot start"


def test_a_version_line_stop_46_remembered_whole_is_read_again(
    fleet: _ForkedFleet, compilers: dict[bool, str]
) -> None:
    """A cc whose version line is 1,118 characters: stop 46 remembers it whole; today's, in
    that home, believed it and keyed as stop 46 (another key than today's anywhere else, so a
    strict miss of today's bundle). Read again now and remembered as today's, once: then
    neither rewrites the file (its third alternation), and each serves today's bundle there."""
    f, env = fleet, _fleet(fleet, compilers[True])
    alone = f.folder / "alone.warm"
    f.ok(f.new, "run", f.workload, "-b", alone, "-q", WARM_HOME=str(f.folder / "h1"), **env)
    f.ok(f.old, "run", f.workload, "-b", f.folder / "old.warm", "-q", **env)
    remembered = f.folder / "home" / "toolchains.json"
    assert any("y" * 1100 in v for v in json.loads(remembered.read_text()).values())
    mine = f.folder / "mine.warm"
    f.ok(f.new, "run", f.workload, "-b", mine, "-q", **env)
    assert keys(mine) == keys(alone), "today's keys follow stop 46's remembered line"
    lines = json.loads(remembered.read_text()).values()
    assert not any("y" * 1100 in v for v in lines), "stop 46's line kept"
    stamps = []
    for _ in range(3):
        for code in (f.old, f.new):
            done = f.serve(code, alone, WARM_STRICT="1", **env)
            assert done["compiled"] == 0 and done["tuned"] == [], (code, done)
        stamps.append(_stamp(remembered))
    assert stamps[-1] == stamps[-2], "toolchains.json rewritten by a hot start"


KEYS = """
import json, sys
from warmcli import Kernel
from warmcli.backends.cuda.nvcc import NvccCompiler
from warmcli.kernel import kernel_key
inc, body = sys.argv[1], 'extern "C" __global__ void p(int *o) { o[0] = V; }'
kernels = {"none": ("#define V 1\\n" + body, ()),
           "stdint": ("#include <stdint.h>\\n#define V 1\\n" + body, ()),
           "own -I": ('#include "cv.h"\\n#define V CV\\n' + body, (f"-I{inc}",))}
identity = NvccCompiler().toolchain.identity
keyed = {name: kernel_key(Kernel(source, "p", "P", language="cuda", options=options), "sm_90",
                          identity) for name, (source, options) in kernels.items()}
print(json.dumps(keyed))
"""


@pytest.mark.nvcc
def test_nvcc_keys_alike_but_where_readme_says_they_moved(tmp_path: Path, old: Path) -> None:
    """nvcc kernels with and without `-I`, with `CPATH` at a folder of the user's: keyed alike
    by both. Under `NVCC_APPEND_FLAGS` or `NVCC_PREPEND_FLAGS` naming an include folder (keyed
    by its headers since warm 47, README), a kernel of no folder of its own keys anew; one with
    its own `-I` as before."""
    nvcc_or_skip()
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "cv.h").write_text("#define CV 5\n")
    (tmp_path / "cp").mkdir()
    (tmp_path / "cp" / "cp.h").write_text("#define CP 1\n")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("WARM_", "NVCC_", "CPATH"))}
    base["WARM_HOME"] = str(tmp_path / "home")

    pythons = ToolEnvPythons(tmp_path)  # a server a warm, whatever CPATH or NVCC_* is set

    def keyed(code: Path, **env: str) -> dict[str, str]:
        done = pythons.run(
            KEYS, str(tmp_path / "inc"), env=dict(base, PYTHONPATH=str(code), **env),
            cwd=tmp_path, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    try:
        for env in ({}, {"CPATH": str(tmp_path / "cp")}):
            assert keyed(old, **env) == keyed(ROOT, **env), env
        for variable in ("NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS"):
            env = {variable: f"-I{tmp_path / 'cp'}"}
            theirs, mine = keyed(old, **env), keyed(ROOT, **env)
            assert mine["own -I"] == theirs["own -I"], variable
            assert mine["none"] != theirs["none"] and mine["stdint"] != theirs["stdint"], variable
    finally:
        pythons.close()
