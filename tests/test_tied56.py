"""A child warm starts is tied to the thread that started it by `setpriv` where it can (Python
then starts it by `vfork`: no copy of a large process a compiler), and runs exactly as a
forked start ran it: the same program, argv[0], errors, output; killed when warm is."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from warmcli.backends import processes, tied

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's tie")


@pytest.fixture
def setpriv() -> str:
    found = tied._setpriv()
    if not found:
        pytest.skip("no setpriv taking --pdeathsig on this machine's PATH")
    return found


@pytest.fixture
def forced_fork() -> Iterator[None]:
    """Every start forked with a `preexec_fn`, as on a machine without setpriv."""
    kept = tied._Found.setpriv
    tied._Found.setpriv = None
    try:
        yield
    finally:
        tied._Found.setpriv = kept


def script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_a_compiler_on_path_is_started_by_setpriv_with_no_preexec(setpriv: str) -> None:
    how = tied.tied(["cc", "--version"], {"PATH": os.environ["PATH"]}, None)
    assert how.argv == [setpriv, "--pdeathsig", "KILL", "--", "cc", "--version"]
    assert how.preexec is None  # so Python starts it by vfork


@pytest.mark.parametrize(
    "env",
    [
        {"PATH": "bin:/usr/bin"},  # a relative entry: searched from the child's folder
        {"PATH": "/usr/bin", "LD_PRELOAD": "/nowhere.so"},  # would load into setpriv too
        {"PATH": "/nowhere"},  # not found: Python's own error
    ],
)
def test_a_start_setpriv_might_not_make_as_python_would_is_forked(
    setpriv: str, env: dict[str, str]
) -> None:
    how = tied.tied(["cc", "--version"], env, None)
    assert how.argv == ["cc", "--version"] and how.preexec is not None and not how.setpriv


def test_a_script_with_no_interpreter_line_is_refused_as_python_refuses_it(
    setpriv: str, tmp_path: Path
) -> None:
    # execvp would run it with /bin/sh; Python's start says `Exec format error`.
    marker = tmp_path / "ran"
    program = script(tmp_path / "wrap", f"touch {marker}\n")
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin"}
    assert tied.tied(["wrap"], env, None).preexec is not None
    with pytest.raises(OSError) as raised:
        processes.run(["wrap"], 10, environ=env)
    assert raised.value.errno == 8 and not marker.exists()
    with pytest.raises(OSError):
        processes.run([str(program)], 10)
    assert not marker.exists()


def test_a_missing_program_is_the_same_error_either_way(
    setpriv: str, forced_fork: None, tmp_path: Path
) -> None:
    with pytest.raises(FileNotFoundError):
        processes.run(["warm-no-such-compiler"], 10, environ={"PATH": str(tmp_path)})


def test_output_argv0_and_status_are_what_a_forked_start_gives(
    setpriv: str, tmp_path: Path
) -> None:
    script(tmp_path / "cc-like", '#!/bin/sh\necho "$0 $# $*"; echo err >&2; exit 3\n')
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", "LC_ALL": "C"}
    args = ["cc-like", "-c", "a b.c"]
    assert tied.tied(args, env, None).setpriv
    via_setpriv = processes.run(args, 10, environ=env)
    tied._Found.setpriv, kept = None, tied._Found.setpriv
    try:
        via_fork = processes.run(args, 10, environ=env)
    finally:
        tied._Found.setpriv = kept
    assert via_setpriv == via_fork
    assert via_setpriv.returncode == 3 and via_setpriv.out == f"{tmp_path}/cc-like 2 -c a b.c\n"


def test_a_relative_program_path_runs_from_the_childs_folder(setpriv: str, tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    script(tmp_path / "bin" / "tool", "#!/bin/sh\npwd\n")
    how = tied.tied(["bin/tool"], {"PATH": "/usr/bin"}, str(tmp_path))
    assert how.setpriv
    done = processes.run(["bin/tool"], 10, cwd=str(tmp_path))
    assert done.returncode == 0 and done.out.strip() == str(tmp_path)


def test_setpriv_saying_it_could_not_start_the_command_is_told_from_the_commands_own_127() -> None:
    how = tied.Tied(
        ["/usr/bin/setpriv", "--pdeathsig", "KILL", "--", "cc"], None, "/usr/bin/setpriv"
    )
    assert tied.setpriv_failed(how, 127, "setpriv: failed to execute cc: No such file or directory")
    assert tied.setpriv_failed(how, 127, "/usr/bin/setpriv: error while loading shared libraries")
    assert not tied.setpriv_failed(how, 127, "sh: 1: cicc: not found\n")  # the compiler's own
    assert not tied.setpriv_failed(how, 1, "setpriv: whatever")
    assert not tied.setpriv_failed(tied.Tied(["cc"], None), 127, "setpriv: failed")


def test_a_file_swapped_after_the_check_is_started_again_forked(
    setpriv: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Checked as an ELF, gone by the time setpriv execs it: the forked start's own error.
    monkeypatch.setattr(tied, "_runs_as_python_would", lambda *_: True)
    with pytest.raises(FileNotFoundError):
        processes.run(["warm-gone-since"], 10, environ={"PATH": str(tmp_path)})


CHILD = """
import sys, threading
from warmcli.backends import processes, tied
if sys.argv[1] == "forked":
    tied._Found.setpriv = None
def start():
    processes.run([sys.argv[2]], 60)
threading.Thread(target=start).start()
threading.Event().wait()
"""


@pytest.mark.parametrize("way", ["setpriv", "forked"])
def test_a_compiler_dies_when_the_warm_that_started_it_is_killed(
    setpriv: str, tmp_path: Path, way: str
) -> None:
    pidfile = tmp_path / "pid"
    sleeper = script(tmp_path / "slow-cc", f"#!/bin/sh\necho $$ > {pidfile}.tmp\n"
                     f"mv {pidfile}.tmp {pidfile}\nexec sleep 60\n")  # fmt: skip
    warm = subprocess.Popen([sys.executable, "-c", textwrap.dedent(CHILD), way, str(sleeper)])
    try:
        deadline = time.monotonic() + 30
        while not pidfile.exists() and time.monotonic() < deadline and warm.poll() is None:
            time.sleep(0.05)
        child = int(pidfile.read_text())
    finally:
        warm.kill()
        warm.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = _alive(child)
    if alive:
        os.kill(child, signal.SIGKILL)
    assert not alive, f"the compiler outlived the warm that started it ({way})"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
