"""What a kernel's key says about the tools that build it: the assembler and linker cc runs.

A host kernel's identity keyed cc's version line but not the `as` and `ld` cc runs (from its
own program folders, `COMPILER_PATH`, else `PATH`), so a wrapper `as` that edits a constant,
or an `ld` that adds `--defsym`, found first on `PATH` built other code under the same key:
a process with it was served the plain build (a stale hit: not what it computes cold), and
a process without it the wrapper's. Real wrappers, the real cc and binutils, the real CLI
(each command and production process a fork of one server of the module whatever `PATH`,
`COMPILER_PATH` or `TMPDIR` it sets, `tests/forked_tool_env.py`).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import ForkedWarm
from forked_tool_env import ToolEnvPythons, ToolEnvServers

from warmcli.backends import toolchain

WORKLOAD = """
from warmcli import Kernel

DEVICE = "host"
K = Kernel(
    "extern char warm_marker[] __attribute__((weak));\\n"
    "#ifndef EXTRA\\n#define EXTRA 0\\n#endif\\n"
    "void f(long *o, int n) { o[0] = 12345; o[1] = (long)warm_marker + EXTRA; }\\n",
    "f", "Pi", options=OPTIONS,
)

def values(rt):
    b = rt.buffer(2, "int64")
    rt.launch(K, b, 2)
    return b

def workload(rt):
    values(rt)
"""

SERVE = """
import json, runpy, sys
import warmcli
module = runpy.run_path(sys.argv[1])
rt = warmcli.runtime("host")
print(json.dumps({"values": [int(v) for v in rt.read(module["values"](rt))],
                  "compiled": len(warmcli.report().kernels)}))
"""

# An `as` that edits the constant in the assembly cc hands it; an `ld` that defines a symbol.
AS_WRAPPER = """#!/bin/sh
for a in "$@"; do case "$a" in *.s) sed -i 's/[$]12345/$54321/g' "$a";; esac; done
exec {real} "$@"
"""
LD_WRAPPER = """#!/bin/sh
exec {real} --defsym=warm_marker=7 "$@"
"""
PLAIN = [12345, 0]


def _real(program: str) -> str:
    """The program cc runs by that name here (its own, else PATH's), as a path."""
    named = subprocess.run(
        ["cc", f"-print-prog-name={program}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    import shutil

    found = named if os.sep in named else shutil.which(named)
    assert found, program
    return found


def _wrappers(folder: Path, which: str) -> Path:
    folder.mkdir(exist_ok=True)
    text = AS_WRAPPER if which == "as" else LD_WRAPPER
    (folder / which).write_text(text.format(real=_real(which)))
    (folder / which).chmod(0o755)
    return folder


def _workload(tmp_path: Path, options: tuple[str, ...] = ()) -> Path:
    path = tmp_path / "w.py"
    path.write_text(WORKLOAD.replace("OPTIONS", repr(options)))
    return path


_python = ToolEnvPythons(ROOT)  # `_serve`'s server, whatever tool variables a test sets
_servers = ToolEnvServers(ROOT)  # the CLI's (`_warm`)


@pytest.fixture(scope="module", autouse=True)
def _pythons() -> Iterator[None]:
    """`_serve`'s and `_warm`'s forking servers, ended with the module."""
    yield
    _python.close()
    _servers.close()


def _warm(env: dict[str, str]) -> ForkedWarm:
    """`Warm(env)`, each command forked from `_servers`."""
    return ForkedWarm(Warm(env), _servers)


@pytest.fixture
def warm(warm: Warm) -> ForkedWarm:
    """conftest's `warm`, each command forked from `_servers`."""
    return ForkedWarm(warm, _servers)


def _serve(env: dict[str, str], workload: Path, bundle: Path | None) -> dict[str, object]:
    """What a production process computed and compiled (over `bundle`, strict, if given): a
    fork of a process that imported numpy and warmcli once (`tests/forked_tool_env.py`;
    `import warmcli` imports no backend and runs no tool, so each child finds the `as`,
    `ld`, `cc1` of its `PATH` and `COMPILER_PATH` as a started process does)."""
    env = {k: v for k, v in env.items() if k not in ("WARM_BUNDLE", "WARM_STRICT")}
    if bundle is not None:
        env.update(WARM_BUNDLE=str(bundle), WARM_STRICT="1")
    done = _python.run(SERVE, str(workload), env=env, cwd=ROOT, timeout=120)
    if done.returncode != 0:
        assert "Traceback" in done.stderr and "toolchain" in done.stderr, done.stderr
        return {"refused": True}
    return json.loads(done.stdout.splitlines()[-1])


def _never_stale(env: dict[str, str], workload: Path, bundle: Path) -> dict[str, object]:
    """A strict served process either refuses (a miss) or computes what a cold one does."""
    cold = _serve(env, workload, None)
    served = _serve(env, workload, bundle)
    assert served.get("refused") or served["values"] == cold["values"], (served, cold)
    return cold


@pytest.mark.parametrize("which", ["as", "ld"])
def test_a_wrapper_as_or_ld_first_on_path_builds_another_kernel(
    warm: Warm, tmp_path: Path, which: str
) -> None:
    workload = _workload(tmp_path)
    bundle = tmp_path / "b.warm"
    run = warm("run", workload, "-b", bundle, "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    assert _serve(warm.env, workload, bundle) == {"values": PLAIN, "compiled": 0}

    wrapped = dict(
        warm.env, PATH=f"{_wrappers(tmp_path / 'wrap', which)}{os.pathsep}{warm.env['PATH']}"
    )
    cold = _never_stale(wrapped, workload, bundle)
    assert cold["values"] == ([54321, 0] if which == "as" else [12345, 7]), cold
    # warming with the wrapper builds its own, and each is served only its own
    run = _warm(wrapped)("run", workload, "-b", bundle, "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    assert _serve(wrapped, workload, bundle) == {**cold, "compiled": 0}
    assert _serve(warm.env, workload, bundle) == {"values": PLAIN, "compiled": 0}


def test_an_as_in_compiler_path_replaced_is_another_kernel(warm: Warm, tmp_path: Path) -> None:
    """`COMPILER_PATH` was keyed by its text alone: the `as` there replaced by one that edits
    the constant otherwise was served the build of the first."""
    folder = _wrappers(tmp_path / "programs", "as")
    env = dict(warm.env, COMPILER_PATH=str(folder))
    workload = _workload(tmp_path)
    bundle = tmp_path / "b.warm"
    run = _warm(env)("run", workload, "-b", bundle, "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    assert _serve(env, workload, bundle) == {"values": [54321, 0], "compiled": 0}
    edited = (folder / "as").read_text().replace("54321", "11111")
    (folder / "as").unlink()  # replaced behind the same name
    (folder / "as").write_text(edited)
    (folder / "as").chmod(0o755)
    cold = _never_stale(env, workload, bundle)
    assert cold["values"] == [11111, 0], cold


BINARY = r"""
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--version")) { puts(VERSION); return 0; }
    execv(REAL, argv);
    return 127;
}
"""


def _binary(path: Path, version: str, real: str) -> None:
    """A program answering `--version` with `version` that otherwise runs `real`: binutils
    of another version, moved over `path` (a new file, as an upgrade writes it)."""
    source = path.with_name("prog.c")
    source.write_text(BINARY)
    new = path.with_name("prog.new")
    defines = [f"-DVERSION={json.dumps(version)}", f"-DREAL={json.dumps(real)}"]
    subprocess.run(["cc", *defines, "-o", str(new), str(source)], check=True)
    os.replace(new, path)


@pytest.mark.parametrize("which", ["as", "ld"])
def test_binutils_upgraded_behind_the_same_name_builds_again(
    warm: Warm, tmp_path: Path, which: str
) -> None:
    """The `as` (`ld`) cc runs from `PATH` upgraded in place: `warm run` builds again, where it
    was a hit (its key held cc's version alone); the older build is still served (it runs
    here, as one of an older cc is)."""
    folder = tmp_path / "bin"
    folder.mkdir()
    real = _real(which)
    _binary(folder / which, f"GNU {which} 2.40", real)
    into = _warm(dict(warm.env, PATH=f"{folder}{os.pathsep}{warm.env['PATH']}"))
    workload = _workload(tmp_path)
    bundle = tmp_path / "b.warm"
    assert into.json("run", workload, "-b", bundle)["stored"]["kernels"] == 1
    assert into.json("run", workload, "-b", bundle)["stored"]["kernels"] == 0  # a hit
    _binary(folder / which, f"GNU {which} 2.41", real)
    assert _serve(into.env, workload, bundle) == {"values": PLAIN, "compiled": 0}
    assert into.json("run", workload, "-b", bundle)["stored"]["kernels"] == 1


@pytest.mark.parametrize("option", ["-B..", "-B", "-Bx", "-fuse-ld=gold", "--ld-path=/bin/ld"])
def test_every_b_prefix_and_linker_choice_is_refused(
    warm: Warm, tmp_path: Path, option: str
) -> None:
    """`-B..` (no `/`) was let through: cc makes a folder's name a prefix (`../as`), here the
    temporary folder the compile's scratch folder is made in, whose `as` no key covers; and
    `-fuse-ld=gold` runs the `ld.gold` found first (a wrapper on `PATH` adding `--defsym`
    built other code under the same key), which the identity (`ld`'s) does not name."""
    options = (option, "..") if option == "-B" else (option,)
    workload = _workload(tmp_path, options)
    temporary = tmp_path / "tmp"
    _wrappers(temporary, "as")
    env = dict(warm.env, TMPDIR=str(temporary))
    run = _warm(env)("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert run.returncode == 2, run.stdout + run.stderr
    assert f"option {option!r} reads a file" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


CUDA_WORKLOAD = """\
from warmcli import Kernel
DEVICE = "cuda"
K = Kernel("extern \\"C\\" __global__ void k(float *o) { o[0] = 3.0f; }", "k", "P",
           language="cuda")
def workload(rt):
    rt.launch(K, rt.buffer(4), grid=1, block=1)
"""


def _toolkits() -> list[Path]:
    """Two toolkit folders of other nvcc releases found here (each `bin/nvcc` a binary, as the
    package's and `/usr/local/cuda-*`'s are), or the test is skipped."""
    from warmcli.backends.cuda.nvcc import nvcc_candidates

    found: dict[str, Path] = {}
    for _, path in nvcc_candidates():
        with open(path, "rb") as head:
            if head.read(2) == b"#!":  # a script: the toolkit it runs
                words = head.read(4096).decode(errors="replace").split()
                path = next((w for w in words if w.endswith("/bin/nvcc")), path)
        done = subprocess.run([path, "--version"], capture_output=True, text=True)
        release = done.stdout.strip().splitlines()[-1:] if done.returncode == 0 else []
        if release and os.path.isfile(path):
            found.setdefault(release[0], Path(path).resolve().parent.parent)
    if len(found) < 2:
        pytest.skip("needs two nvcc releases (the package's and a toolkit's)")
    return list(found.values())[:2]


@pytest.fixture(scope="module", autouse=True)
def _nvcc_script(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, float] | str:
    """The nvcc script's folder (`cuda`, a link to the older toolkit, and `script/nvcc`
    running `cuda/bin/nvcc`), the newer toolkit and when the script was written, or why the
    test is skipped: made as the module starts, so the wait for it to settle
    (`toolchain.RACY_SECONDS`) passes while the tests before it run."""
    try:
        older, newer = _toolkits()
    except pytest.skip.Exception as exc:
        return str(exc)
    folder = tmp_path_factory.mktemp("nvcc-script")
    (folder / "cuda").symlink_to(older)
    script = folder / "script" / "nvcc"
    script.parent.mkdir()
    script.write_text(f'#!/bin/sh\nexec {folder / "cuda" / "bin" / "nvcc"} "$@"\n')
    script.chmod(0o755)
    return folder, newer, time.time()


def test_an_nvcc_script_is_keyed_by_the_toolkit_behind_it(
    warm: Warm, tmp_path: Path, _nvcc_script: tuple[Path, Path, float] | str
) -> None:
    """An `nvcc` that is a script (`exec /opt/cuda/bin/nvcc "$@"`): its version line was
    remembered by the script's stamp, so a toolkit upgraded behind it (`/opt/cuda` repointed)
    kept the old release in every key: `warm run` built nothing, calling the new release's
    kernels the old one's. Now it is remembered by the stamp of the nvcc the script runs too
    (two real toolkits: `/usr/local/cuda-13.0`'s and the package's, 13.5)."""
    if isinstance(_nvcc_script, str):
        pytest.skip(_nvcc_script)
    folder, newer, written = _nvcc_script
    script = folder / "script" / "nvcc"
    # a file changed since is never remembered: what is left of that wait
    time.sleep(max(0.0, written + toolchain.RACY_SECONDS - time.time()))
    (tmp_path / "w.py").write_text(CUDA_WORKLOAD)
    bundle = tmp_path / "b.warm"
    into = warm.with_env(WARM_NVCC=str(script))
    args = ("--arch", "sm_90", "--compiler", "nvcc", "-b", bundle)
    built = into.json("run", tmp_path / "w.py", *args)["stored"]["kernels"]
    assert built == 2  # its cubin and its PTX
    assert into.json("run", tmp_path / "w.py", *args)["stored"]["kernels"] == 0  # a hit
    (folder / "cuda").unlink()  # the toolkit upgraded behind the same script
    (folder / "cuda").symlink_to(newer)
    said = subprocess.run([script, "--version"], capture_output=True, text=True).stdout
    devices = into("devices", "--compiler", "nvcc")
    assert said.splitlines()[-2] in devices.stdout, devices.stdout + devices.stderr
    assert into.json("run", tmp_path / "w.py", *args)["stored"]["kernels"] == built


@pytest.mark.parametrize("program", ["cc1", "collect2"])
def test_a_cc1_or_collect2_in_compiler_path_replaced_is_another_kernel(
    warm: Warm, tmp_path: Path, program: str
) -> None:
    """`COMPILER_PATH` was keyed by its text alone: a `cc1` there that defines a macro (or a
    `collect2` that hands ld a `--defsym`) replaced by another behind the same name was
    served the first one's build (`as` and `ld` there: above)."""
    real = _real(program)
    folder = tmp_path / "programs"
    folder.mkdir()
    adds = {"cc1": "-DEXTRA=3", "collect2": "--defsym=warm_marker=3"}[program]

    def wrapper(value: str) -> None:
        (folder / program).unlink(missing_ok=True)  # replaced behind the same name
        (folder / program).write_text(f'#!/bin/sh\nexec {real} {adds.replace("3", value)} "$@"\n')
        (folder / program).chmod(0o755)

    wrapper("3")
    env = dict(warm.env, COMPILER_PATH=str(folder))
    workload = _workload(tmp_path)
    bundle = tmp_path / "b.warm"
    run = _warm(env)("run", workload, "-b", bundle, "-q")
    assert run.returncode == 0, run.stdout + run.stderr
    assert _serve(env, workload, bundle) == {"values": [12345, 3], "compiled": 0}
    wrapper("5")
    cold = _never_stale(env, workload, bundle)
    assert cold["values"] == [12345, 5], cold
