"""A hot process's remembered cc identity (`host.identity`) against programs changed under it.

The identity is believed while the stamp of every place it was found by is the same; it was
remembered with the stamps read after finding it, and young ones (changed in the last
`RACY_SECONDS`) refused then. A program replaced while the identity was being found (binutils
upgraded as a process started, its finding slowed past `RACY_SECONDS`: a cold disk, a loaded
machine) left the old program's version line remembered under the new program's stamps: every
later process believed it, and was served the build of the old `as` under a key the new one
no longer has. Real processes (each a fork of one that imported the CLI, or warmcli, once,
whatever `PATH` it sets: `tests/forked_tool_env.py`), the real CLI, cc and `as`; the `as`
here is a binary (a script's identity is never remembered) that answers `--version` and runs
the real one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import ForkedWarm
from forked_tool_env import ToolEnvPythons, ToolEnvServers
from test_review46a import SERVE, WORKLOAD  # a host kernel writing 12345, and its serving

from warmcli.backends import toolchain

# A binary `as`: prints VERSION for `--version` (then, where SWAP names a file, renames it
# over itself and sleeps SLEEP µs: an upgrade landing while a process finds its
# identity), else edits the constant 12345 in the assembly where EDIT, and runs the real one.
AS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--version")) {
        puts(VERSION);
        fflush(stdout);
        if (SWAP[0]) { rename(SWAP, SELF); usleep(SLEEP); }
        return 0;
    }
    for (int i = 1; EDIT && i < argc; i++) {
        size_t n = strlen(argv[i]);
        char cmd[4096];
        if (n > 2 && !strcmp(argv[i] + n - 2, ".s")) {
            snprintf(cmd, sizeof cmd, "sed -i 's/[$]12345/$54321/g' '%s'", argv[i]);
            if (system(cmd)) return 1;
        }
    }
    execv(REAL, argv);
    return 127;
}
"""


# A process's identity of cc: the one it uses (remembered, where believed) and the one
# finding it anew gives (`found_anew`).
PROBE = """
import json
from warmcli import config
from warmcli.backends.host.compiler import HostCompiler, found_anew, host_cc
moved, search = tuple(config.compiler_programs().items()), config.path()
print(json.dumps([HostCompiler().toolchain.version, found_anew(host_cc(), moved, search).version]))
"""


def _as(out: Path, version: str, edit: bool = False, swap: Path | None = None) -> Path:
    source = out.parent / f"{out.name}.c"
    source.write_text(AS)
    defines = {
        "VERSION": json.dumps(version),
        "REAL": json.dumps(shutil.which("as")),
        "EDIT": str(int(edit)),
        "SWAP": json.dumps(str(swap or "")),
        "SELF": json.dumps(str(out)),
        "SLEEP": str(int((toolchain.RACY_SECONDS + 0.3) * 1e6)),  # (µs)
    }
    flags = [f"-D{name}={value}" for name, value in defines.items()]
    subprocess.run(["cc", *flags, "-o", str(out), str(source)], check=True)
    return out


TREES = ("by name", "by path")


@pytest.fixture(scope="module")
def aged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Each test's folders, made and then left alone past `RACY_SECONDS` (a stamp that young
    is never remembered), once for all: `swap/bin` with `as` 2.40, `busy`, a tree per
    `TREES` (`cur` a link to `x`; `x` and `y` hold the same gcc, `y` an `as` of its own in
    its `lib/gcc`), and `many`, 2,100 folders."""
    root = tmp_path_factory.mktemp("review47c")
    (root / "swap" / "bin").mkdir(parents=True)
    _as(root / "swap" / "bin" / "as", "GNU assembler (warm test) 2.40")
    (root / "busy").mkdir()
    gcc = os.path.realpath(shutil.which("gcc") or "")
    machine, version = (
        subprocess.run([gcc, f"-dump{what}"], capture_output=True, text=True).stdout.strip()
        for what in ("machine", "version")
    )
    own = f"lib/gcc/{machine}/{version}"  # (a folder of its own: `tree/bin/../<own>/as`)
    # The trees hard-link a copy of gcc, never the system's own file: a link made or removed
    # changes that file's ctime, which every identity remembered meanwhile stamps (cc's file),
    # so a test process beside this one would find its memo racy and never remember it
    # (`test_speed47` failed so in two fresh-clone CIs, never alone).
    shutil.copy2(gcc, root / "gcc")
    for named in TREES:
        for tree in ("x", "y"):
            (root / named / tree / "bin").mkdir(parents=True)
            os.link(root / "gcc", root / named / tree / "bin" / "gcc")
            (root / named / tree / own).mkdir(parents=True)
        _as(root / named / "y" / own / "as", "GNU assembler (warm test) 2.41")
        (root / named / "cur").symlink_to("x")
    for n in range(2100):
        (root / "many" / str(n)).mkdir(parents=True)
    time.sleep(toolchain.RACY_SECONDS + 0.2)
    return root


_pythons = ToolEnvPythons(ROOT)  # the module's forking servers, whatever PATH a test sets
_servers = ToolEnvServers(ROOT)


@pytest.fixture(scope="module", autouse=True)
def _forking() -> Iterator[None]:
    yield
    _pythons.close()
    _servers.close()


def _python(env: dict[str, str], code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -c code *args` in `env`, a fork of `_pythons`' server."""
    return _pythons.run(code, *args, env=env, cwd=ROOT)  # type: ignore[no-any-return]


def _warm(env: dict[str, str]) -> ForkedWarm:
    return ForkedWarm(Warm(env), _servers)


def _identities(env: dict[str, str]) -> list[str]:
    done = _python(env, PROBE)
    assert done.returncode == 0, done.stderr
    seen: list[str] = json.loads(done.stdout)
    return seen


def _assembler(version: str) -> str:
    return version.split("; as ", 1)[1].split("; ", 1)[0]


def test_an_as_replaced_while_its_identity_is_found_is_never_believed_as_the_old_one(
    warm: Warm, tmp_path: Path, aged: Path
) -> None:
    """`as` 2.40 built the bundle; a process finding cc's identity anew read its version line,
    then (before it stamped the places) `as` was replaced by 2.41, which edits a constant.
    That process remembered `as 2.40` under 2.41's stamps: the next believed it (its key the
    bundle's), a re-warm was a hit, and 12345 was served where a cold start computes 54321."""
    folder = aged / "swap" / "bin"
    env = dict(warm.env, PATH=f"{folder}{os.pathsep}{warm.env['PATH']}")
    workload, bundle = tmp_path / "w.py", tmp_path / "b.warm"
    workload.write_text(WORKLOAD)
    run = _warm(env)("run", workload, "-b", bundle, "-q")
    assert run.returncode == 0, run.stdout + run.stderr

    # the upgrade: 2.41 (editing) put in place while a process asks 2.40 for its version
    upgrade = _as(folder / "as.new", "GNU assembler (warm test) 2.41", edit=True)
    _as(folder / "as", "GNU assembler (warm test) 2.40", swap=upgrade)
    assert _assembler(_identities(env)[0]).endswith("2.40")  # (what it found, as it ran)
    assert not upgrade.exists()

    hot, anew = _identities(env)
    assert hot == anew and _assembler(hot).endswith("2.41"), (hot, anew)
    run = _warm(env)("run", workload, "-b", bundle, "-q")  # a re-warm builds 2.41's (no hit)
    assert run.returncode == 0, run.stdout + run.stderr
    cold = _python(env, SERVE, str(workload))
    served = _python({**env, "WARM_BUNDLE": str(bundle), "WARM_STRICT": "1"}, SERVE, str(workload))
    assert cold.returncode == 0 and json.loads(cold.stdout) == [54321], cold.stderr
    assert served.returncode == 0 and json.loads(served.stdout) == [54321], served.stderr


OPENS = """
import json, sys
opened = []
sys.addaudithook(lambda e, a: opened.append(1) if e == "open" and "toolchains" in str(a[0]) else 0)
from warmcli.backends.host.compiler import HostCompiler
HostCompiler().toolchain
print(len(opened))
"""


def test_a_folder_changing_in_every_process_costs_what_it_did_before_the_memo(
    warm: Warm, aged: Path
) -> None:
    """A folder on `PATH` before cc's changed just before each process (its stamp racy): the
    remembered identity is never believed, nor could one be remembered. Each process read
    `toolchains.json` twice as before the memo and once for it, then again to stamp every
    place (~60 `stat`s, ~300 µs: 724 µs of a hot start's identity where it had been 346) only
    to find that folder's stamp racy; it now tries no more where the place it disbelieved the
    memo by is racy (and stops at the first racy stamp)."""
    folder = aged / "busy"
    env = dict(warm.env, PATH=f"{folder}{os.pathsep}{warm.env['PATH']}")
    assert _python(env, OPENS).returncode == 0  # (remembered)
    assert int(_python(env, OPENS).stdout) == 1  # believed
    (folder / "x").touch()
    done = _python(env, OPENS)
    assert done.returncode == 0 and int(done.stdout) == 3, done.stdout + done.stderr


@pytest.mark.parametrize("named", TREES)
def test_a_cc_through_a_link_repointed_to_another_tree_of_the_same_binary_finds_its_as(
    warm: Warm, tmp_path: Path, aged: Path, named: str
) -> None:
    """gcc finds its programs beside the file it resolves to (`tree/bin/../lib/gcc/...`),
    and cc's program folders were remembered by cc's stamp and the path it was started by: a
    link to a tree repointed to another whose gcc is the same file (a hard link: `cp -al`,
    `rsync --link-dest`), with its own `as` in its `lib/gcc`, left the first tree's folders
    remembered. The identity memo saw `PATH`'s folder change, but finding it anew read the
    old folders: the plain `as` was keyed where the tree's own runs; `WARM_CC` a path through
    the link, the memo saw nothing change (cc's own stamp is the same) and was believed."""
    root = aged / named
    env = dict(warm.env, WARM_CC="gcc", PATH=f"{root / 'cur' / 'bin'}:{warm.env['PATH']}")
    if named == "by path":
        env.update(WARM_CC=str(root / "cur" / "bin" / "gcc"), PATH=warm.env["PATH"])
    hot, anew = _identities(env)
    assert hot == anew and "2.41" not in hot
    (root / "cur.new").symlink_to("y")
    os.replace(root / "cur.new", root / "cur")
    hot, anew = _identities(env)
    fresh = _identities({**env, "WARM_HOME": str(tmp_path / "fresh")})
    assert hot == anew == fresh[1] and _assembler(hot).endswith("2.41"), (hot, fresh)


def test_an_identity_of_more_places_than_is_believed_is_not_written_in_every_process(
    warm: Warm, aged: Path
) -> None:
    """`PATH` of 2,100 folders before cc's (a module system's, a shell of many packages'):
    the identity's places past `toolchain.MAX_PARTS` parts, which no process believes, were
    remembered by every process (`toolchains.json` written anew each time, ~24 ms)."""
    short = Path(tempfile.mkdtemp(prefix="r47c"))  # (one variable holds at most 128 KiB)
    (short / "m").symlink_to(aged / "many")
    try:
        many = [f"{short}/m/{n}" for n in range(2100)]
        env = dict(warm.env, PATH=os.pathsep.join([*many, warm.env["PATH"]]))
        versions = Path(env["WARM_HOME"]) / "toolchains.json"
        _identities(env)
        held = json.loads(versions.read_text())
    finally:
        (short / "m").unlink()
        short.rmdir()
    assert not [k for k in held if k.startswith(toolchain.PARTED)], [len(v) for v in held.values()]
