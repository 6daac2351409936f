"""Stop 56: warm's probes in a process that ignores SIGCHLD.

Such a process (a daemon's `signal.signal(SIGCHLD, SIG_IGN)`, or one that inherited it across
exec) has the kernel reap its children: Python reads every child's exit status as 0. A compiler
probe that failed there was read as one that answered: a C compiler whose `cc -E -v` fails
(asked again in the next process, as its module doc says) was remembered in warm's home as one
that names no folders of its own, so every later process, SIGCHLD or not, believed it; and a
compiler whose `--version` fails, saying so on stderr, was keyed by its error line (`warm` in
any other process says `--version failed`). A `warm run` started ignoring it lost its worker's
status: a crash said `[Errno 10] No child processes`, not the crash (a crashing tune candidate
was never excluded). Real parts: a real C compiler binary (a C program
that runs gcc but fails the probe in question, so warm remembers what it answers), real
processes, one ignoring SIGCHLD.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from warmcli.backends.toolchain import RACY_SECONDS

FAKE = r"""
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int dash_e = 0, dash_v = 0, version = 0;
    for (int i = 1; i < argc; i++) {
        dash_e |= !strcmp(argv[i], "-E");
        dash_v |= !strcmp(argv[i], "-v");
        version |= !strcmp(argv[i], "--version");
    }
    if ((FAIL_E && dash_e && dash_v) || (FAIL_VERSION && version)) {
        fprintf(stderr, "fakecc: cannot run cc1: No such file or directory\n");
        return 1;
    }
    argv[0] = "gcc";
    execvp("gcc", argv);
    return 127;
}
"""

ASK = """
import json, signal, sys
if sys.argv[1] == "ignore":
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
from warmcli.backends import system_folders, toolchain
from warmcli.errors import ToolchainError
try:
    said = [toolchain.probe("cc", sys.argv[2]).version,
            list(system_folders.system_folders(sys.argv[2]))]
except ToolchainError as exc:
    said = ["ToolchainError", str(exc)]
print(json.dumps(said))
"""


def _fake_cc(tmp_path: Path, fail_e: bool, fail_version: bool) -> str:
    """A C compiler binary that runs gcc, but fails `-E -v` or `--version` (exit 1)."""
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    source = tmp_path / "fakecc.c"
    source.write_text(FAKE)
    binary = tmp_path / "fakecc"
    defines = [f"-DFAIL_E={int(fail_e)}", f"-DFAIL_VERSION={int(fail_version)}"]
    subprocess.run(["gcc", *defines, "-o", str(binary), str(source)], check=True)
    time.sleep(RACY_SECONDS + 0.2)  # (a younger binary's answers are never remembered)
    return str(binary)


def _ask(home: Path, how: str, cc: str) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env["WARM_HOME"] = str(home)
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", ASK, how, cc],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_failed_search_list_probe_where_sigchld_is_ignored_is_not_remembered(
    tmp_path: Path,
) -> None:
    cc = _fake_cc(tmp_path, fail_e=True, fail_version=False)
    home = tmp_path / "home"
    version, folders = _ask(home, "ignore", cc)  # its `-E -v` failed, read as exit 0
    assert version.startswith("gcc") and folders == [], (version, folders)
    # Was: remembered in the home as a compiler naming no folders of its own, and so believed
    # by every later process (one that fails is asked again by the next: the module's doc).
    remembered = home / "toolchains.json"
    assert not remembered.exists() or "cc -E -v includes" not in remembered.read_text()
    _ask(home, "default", cc)
    assert "cc -E -v includes" not in remembered.read_text()  # a failure: not remembered


def test_a_failed_version_probe_where_sigchld_is_ignored_is_not_a_version_line(
    tmp_path: Path,
) -> None:
    cc = _fake_cc(tmp_path, fail_e=False, fail_version=True)
    default = _ask(tmp_path / "home", "default", cc)
    assert default[0] == "ToolchainError" and "--version failed" in default[1], default
    ignoring = _ask(tmp_path / "home2", "ignore", cc)
    assert ignoring[0] == "ToolchainError", ignoring  # was the error line, as its version
    assert "--version failed" in ignoring[1] and "SIGCHLD" in ignoring[1], ignoring


CRASH = """
import os, pathlib, signal
pathlib.Path(os.environ["SEEN"]).write_text(str(signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN))
os.kill(os.getpid(), signal.SIGSEGV)
"""
IGNORED = """
import os, signal, sys
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # a daemon's idiom: kept across exec
os.execv(sys.executable, [sys.executable, "-m", "warmcli", *sys.argv[1:]])
"""


def test_warm_run_started_ignoring_sigchld_tells_its_workers_crash(tmp_path: Path) -> None:
    workload, seen = tmp_path / "crash.py", tmp_path / "seen"
    workload.write_text(CRASH)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env["WARM_HOME"], env["SEEN"] = str(tmp_path / "home"), str(seen)
    command = ["run", str(workload), "--bundle", str(tmp_path / "b.warm")]
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-c", IGNORED, *command],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=300,
    )
    assert done.returncode != 0
    # Was: 'warm: error: [Errno 10] No child processes' (the worker reaped by the kernel).
    assert "the workload crashed (SIGSEGV)" in done.stderr, done.stderr
    assert seen.read_text() == "True"  # the workload's SIGCHLD as inherited: ignored
