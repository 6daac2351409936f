"""Review of warm 46's host identity (`warmcli.backends.host.programs`): the `as` cc runs.

cc runs in a scratch folder warm makes in the temporary folder, so a relative `PATH` entry
(`..`, `.`, `bin`) is read from there, never from the folder `warm` was started in: `..:$PATH`
ran the temporary folder's `as`, which no key named (a plain process was then served that
wrapper's build), and an `as` in the folder warm ran from was keyed though cc never ran it (a
rebuild after a `cd`). A wrapper `as` with no `#!` line (the shell runs it) answers no
`--version`: it was keyed by its name alone, so an edit to it was served the old build. Real
wrappers, the real cc and binutils, the real CLI and production processes (each a fork of a
process that imported the CLI, or numpy and warmcli, once, whatever `PATH`, `TMPDIR` or
`COMPILER_PATH` it sets: `tests/forked_tool_env.py`; the child finds the `as`, `cc1`, `lto1`
there as a started process does, and has computed no identity yet).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import ForkedWarm
from forked_tool_env import ToolEnvPythons, ToolEnvServers

WORKLOAD = """
from warmcli import Kernel

DEVICE = "host"
K = Kernel("void f(long *o, int n) { o[0] = 12345; }\\n", "f", "Pi")

def values(rt):
    b = rt.buffer(1, "int64")
    rt.launch(K, b, 1)
    return b

def workload(rt):
    values(rt)
"""

SERVE = """
import json, runpy, sys
import warmcli
module = runpy.run_path(sys.argv[1])
rt = warmcli.runtime("host")
print(json.dumps([int(v) for v in rt.read(module["values"](rt))]))
"""

# An `as` that edits the constant in the assembly cc hands it (`#!` line or none).
EDITS = """for a in "$@"; do case "$a" in *.s) sed -i 's/[$]12345/$54321/g' "$a";; esac; done
exec {real} "$@"
"""


def _real_as() -> str:
    import shutil

    named = subprocess.run(
        ["cc", "-print-prog-name=as"], capture_output=True, text=True, check=True
    ).stdout.strip()
    found = named if os.sep in named else shutil.which(named)
    assert found
    return found


def _as(folder: Path, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "as").write_text(text)
    (folder / "as").chmod(0o755)


_python = ToolEnvPythons(ROOT)  # production processes, whatever tool variables a test sets
_servers = ToolEnvServers(ROOT)  # and the CLI's (`tests/forked_tool_env.py`)


@pytest.fixture(scope="module", autouse=True)
def _forking() -> Iterator[None]:
    """The module's forking servers, ended with it."""
    yield
    _python.close()
    _servers.close()


@pytest.fixture
def warm(warm: Warm) -> ForkedWarm:
    """conftest's `warm`, each command (and each `with_env` of it) forked from `_servers`."""
    return ForkedWarm(warm, _servers)


def _serve(env: dict[str, str], workload: Path, bundle: Path | None) -> list[int]:
    """What a production process computes (over `bundle`, if given): a fork of a process
    that imported numpy and warmcli once, run in `env` whole (`tests/forked_tool_env.py`;
    `import warmcli` imports no backend and runs no tool, so each child finds the `as`,
    `cc1`, `lto1` of `env`'s `PATH`, `TMPDIR`, `COMPILER_PATH` as a started process does)."""
    env = {k: v for k, v in env.items() if k != "WARM_BUNDLE"}
    if bundle is not None:
        env["WARM_BUNDLE"] = str(bundle)
    done = _python.run(SERVE, str(workload), env=env, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def _run(warm: Warm, workload: Path, bundle: Path, cwd: Path = ROOT) -> int:
    """`warm run`: the kernels it stored."""
    done = warm("run", workload, "-b", bundle, "--json", cwd=cwd)
    assert done.returncode == 0, done.stdout + done.stderr
    return int(json.loads(done.stdout)["stored"]["kernels"])


def test_a_parent_path_entry_runs_the_temporary_folders_as_which_keys(
    warm: Warm, tmp_path: Path
) -> None:
    """`PATH=..:$PATH`: cc, in its scratch folder, runs `$TMPDIR/as`; warm looked for `../as`
    beside the folder it ran in, found none and keyed the plain `as`, so a plain process
    was served the wrapper's build (54321 where cold computes 12345)."""
    temporary, started = tmp_path / "tmp", tmp_path / "project" / "here"
    started.mkdir(parents=True)
    _as(temporary, "#!/bin/sh\n" + EDITS.format(real=_real_as()))
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    dotted = warm.with_env(PATH=f"..{os.pathsep}{warm.env['PATH']}", TMPDIR=str(temporary))
    assert _serve(dotted.env, workload, None) == [54321]  # what cc runs there
    assert _run(dotted, workload, bundle, cwd=started) == 1
    plain = dict(warm.env, TMPDIR=str(temporary))
    assert _serve(plain, workload, None) == [12345]
    assert _serve(plain, workload, bundle) == [12345]  # a miss, never the wrapper's build


def test_an_as_beside_the_folder_warm_runs_in_is_not_what_cc_runs(
    warm: Warm, tmp_path: Path
) -> None:
    """`PATH=.:$PATH` with an `as` in the folder warm starts in: cc's `./as` is its scratch
    folder's (none), yet that `as` was keyed, so the same build from another folder was
    another key, built and stored again."""
    here, there = tmp_path / "here", tmp_path / "there"
    _as(here, "#!/bin/sh\n" + EDITS.format(real=_real_as()))
    there.mkdir()
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    dotted = warm.with_env(PATH=f".{os.pathsep}{warm.env['PATH']}")
    assert _run(dotted, workload, bundle, cwd=here) == 1
    assert _run(dotted, workload, bundle, cwd=there) == 0  # the same cc, as, ld: a hit
    assert _serve(warm.env, workload, bundle) == [12345]


def test_an_as_script_without_a_shebang_is_keyed_by_its_text(warm: Warm, tmp_path: Path) -> None:
    """A wrapper `as` with no `#!` (cc's exec runs it with /bin/sh) was keyed `as (no version
    line)` whatever it held: edited not to edit the constant, the old build was served."""
    folder = tmp_path / "bin"
    _as(folder, EDITS.format(real=_real_as()))
    env = warm.with_env(PATH=f"{folder}{os.pathsep}{warm.env['PATH']}")
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    assert _serve(env.env, workload, None) == [54321]
    assert _run(env, workload, bundle) == 1
    assert _run(env, workload, bundle) == 0  # read again in each process: the same key
    assert _serve(env.env, workload, bundle) == [54321]
    _as(folder, f'exec {_real_as()} "$@"\n')
    assert _serve(env.env, workload, None) == [12345]
    assert _serve(env.env, workload, bundle) == [12345]  # its edit is another key


def test_a_linker_or_program_option_refused_says_what_to_do(warm: Warm, tmp_path: Path) -> None:
    """`-fuse-ld=lld` and a bare `-Bsymbolic` (cc's `-B symbolic`, a prefix of the programs
    it runs) were refused as reading "a file (options, an include prefix or folder, ...)",
    told to "give them in options (-D..., -I folder, ...)", which neither can be: each is
    now named for what it is, with what to write instead."""
    said = {}
    for option in ("-fuse-ld=lld", "-Bsymbolic"):
        workload = tmp_path / "w.py"
        workload.write_text(WORKLOAD.replace('"Pi")', f'"Pi", options=[{option!r}])'))
        done = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        said[option] = done.stderr
    assert "linker" in said["-fuse-ld=lld"] and "-D..." not in said["-fuse-ld=lld"]
    assert "-Wl,-Bsymbolic" in said["-Bsymbolic"] and "-D..." not in said["-Bsymbolic"]


def test_a_compiler_failing_version_silently_is_named_with_its_exit_status(
    warm: Warm, tmp_path: Path
) -> None:
    """A compiler (`WARM_CC`, an nvcc) exiting 3, printing nothing, was said `--version failed: ;
    needed at ...`: the reason left blank. Now its exit status."""
    silent = tmp_path / "nvcc"
    silent.write_text("#!/bin/sh\nexit 3\n")
    silent.chmod(0o755)
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD)
    done = warm.with_env(WARM_CC=str(silent))("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "--version failed (exit status 3)" in done.stderr, done.stderr
    assert not (tmp_path / "b.warm").exists()


def _program(name: str) -> str:
    """cc's own `name` (`cc1`, `lto1`), as a path."""
    found = subprocess.run(
        ["cc", f"-print-prog-name={name}"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert os.path.isabs(found), found
    return found


# An `lto1` that edits the constant in the assembly it writes (`-o FILE`).
LTO1 = """#!/bin/sh
{real} "$@" || exit $?
out=""; prev=""; for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; done
[ -n "$out" ] && sed -i 's/[$]12345/$VALUE/g' "$out"
exit 0
"""


def test_an_lto1_in_compiler_path_edited_is_another_kernel(warm: Warm, tmp_path: Path) -> None:
    """With `-flto` cc runs the `lto1` (and `lto-wrapper`) found first in `COMPILER_PATH`,
    which the identity did not name (only `cc1`, `collect2`, `as`, `ld`): edited, a process
    was served the build of the first."""
    folder = tmp_path / "programs"
    folder.mkdir()
    lto1 = folder / "lto1"
    lto1.write_text(LTO1.format(real=_program("lto1")).replace("VALUE", "54321"))
    lto1.chmod(0o755)
    env = warm.with_env(COMPILER_PATH=str(folder))
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD.replace('"Pi")', '"Pi", options=["-flto", "-O2"])'))
    bundle = tmp_path / "b.warm"
    assert _run(env, workload, bundle) == 1
    assert _serve(env.env, workload, bundle) == [54321]
    lto1.write_text(LTO1.format(real=_program("lto1")).replace("VALUE", "11111"))
    assert _serve(env.env, workload, None) == [11111]
    assert _serve(env.env, workload, bundle) == [11111]


# A `cc1` binary that runs cc's own with a macro defined: it prints no version line.
CC1 = r"""
#include <unistd.h>
int main(int argc, char **argv) {
    char *args[argc + 2];
    for (int i = 0; i < argc; i++) args[i] = argv[i];
    args[argc] = DEFINE; args[argc + 1] = 0;
    execv(REAL, args);
    return 127;
}
"""


def _cc1(folder: Path, extra: int) -> None:
    source = folder / "cc1.c"
    source.write_text(CC1)
    new = folder / "cc1.new"
    defines = [f'-DDEFINE="-DEXTRA={extra}"', f"-DREAL={json.dumps(_program('cc1'))}"]
    subprocess.run(["cc", *defines, "-o", str(new), str(source)], check=True)
    os.replace(new, folder / "cc1")


def test_a_cc1_binary_replaced_in_compiler_path_is_another_kernel(
    warm: Warm, tmp_path: Path
) -> None:
    """A `cc1` prints no version line: keyed `cc1 (no version line)` by its name alone, a
    binary replaced behind it in `COMPILER_PATH` (another GCC's, one defining a macro) was
    the same toolchain: `warm run` built nothing again, and a process was served the first's
    build (as one of another cc is, where its own is not in the bundle). Keyed by its
    content's digest now, remembered by its stamp: built again, and its own build served."""
    folder = tmp_path / "programs"
    folder.mkdir()
    _cc1(folder, 0)
    env = warm.with_env(COMPILER_PATH=str(folder))
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD.replace("o[0] = 12345;", "o[0] = 12345 + EXTRA;"))
    bundle = tmp_path / "b.warm"
    assert _run(env, workload, bundle) == 1
    assert _serve(env.env, workload, bundle) == [12345]
    _cc1(folder, 7)
    assert _serve(env.env, workload, None) == [12352]
    assert _run(env, workload, bundle) == 1  # (stored 0: the same identity)
    assert _serve(env.env, workload, bundle) == [12352]


CUDA_WORKLOAD = """
from warmcli import Kernel
DEVICE = "cuda"
K = Kernel("#ifndef EXTRA\\n#define EXTRA 0\\n#endif\\n"
           "extern \\"C\\" __global__ void k(float *o) { o[0] = 3.0f + EXTRA; }", "k", "P",
           language="cuda")
def workload(rt):
    rt.launch(K, rt.buffer(4), grid=1, block=1)
"""


def test_nvccs_gcc_from_a_parent_path_entry_is_keyed(warm: Warm, tmp_path: Path) -> None:
    """nvcc, run in its scratch folder, finds its host compiler on `PATH=..:$PATH` in the
    temporary folder (a `gcc` adding `-DEXTRA=7` built another cubin); warm looked for it
    from the folder it ran in and keyed the plain `gcc`: the same key for both builds, so
    `warm run` without that `gcc` built nothing again and a process was served its cubin."""
    from conftest import nvcc_or_skip

    nvcc_or_skip()
    temporary, started = tmp_path / "tmp", tmp_path / "project" / "here"
    started.mkdir(parents=True)
    temporary.mkdir()
    import shutil

    real = shutil.which("gcc", path=warm.env["PATH"])
    assert real
    (temporary / "gcc").write_text(f'#!/bin/sh\nexec {real} -DEXTRA=7 "$@"\n')
    (temporary / "gcc").chmod(0o755)
    workload = tmp_path / "w.py"
    workload.write_text(CUDA_WORKLOAD)
    bundle = tmp_path / "b.warm"
    nvcc = warm.with_env(WARM_CUDA_COMPILER="nvcc", TMPDIR=str(temporary))
    dotted = nvcc.with_env(PATH=f"..{os.pathsep}{warm.env['PATH']}")

    def stored(who: Warm, cwd: Path) -> int:
        done = who("run", workload, "--arch", "sm_90", "-b", bundle, "--json", cwd=cwd)
        assert done.returncode == 0, done.stdout + done.stderr
        return int(json.loads(done.stdout)["stored"]["kernels"])

    assert stored(dotted, started) > 0
    assert stored(nvcc, started) > 0  # another host compiler: built again (stored 0 before)


def test_the_linker_plugin_in_compiler_path_replaced_builds_again(
    warm: Warm, tmp_path: Path
) -> None:
    """cc hands `ld` the `liblto_plugin.so` found first in its folders (`-plugin`, on every
    link, `-flto` or not): one in `COMPILER_PATH` is code run in the linker, which no identity
    named, so another there built nothing again. Keyed by its content's digest now."""
    folder = tmp_path / "programs"
    folder.mkdir()
    plugin = folder / "liblto_plugin.so"
    own = subprocess.run(
        ["cc", "-print-file-name=liblto_plugin.so"], capture_output=True, text=True, check=True
    ).stdout.strip()
    plugin.write_bytes(Path(own).read_bytes())
    env = warm.with_env(COMPILER_PATH=str(folder))
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    assert _run(env, workload, bundle) == 1
    assert _run(env, workload, bundle) == 0
    plugin.write_bytes(plugin.read_bytes() + b"\0another build")  # still loads
    assert _serve(env.env, workload, None) == [12345]
    assert _run(env, workload, bundle) == 1  # (stored 0: the same identity)
