"""Compilers started through warm's tie helper (`warmcli.backends.tied_start`): Python vforks
the helper (no `preexec_fn`, which made it fork the whole process), the helper arms the
parent-death signal, checks its parent lives and runs the command, as Python's own start would
(its PATH search, its errors). Real C compiler, real processes; the helpers standing in for a
broken build are named fakes."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_passover38 import _alive

from warmcli.backends import processes, tied_start

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.access("/usr/bin/cc", os.X_OK),
    reason="the helper is built by /usr/bin/cc, on Linux",
)


def test_the_helper_is_built_once_and_trusted() -> None:
    path = tied_start.helper_path()
    assert path is not None and os.path.basename(path).startswith("warm-tie-")
    st = os.stat(path)
    assert st.st_uid in (0, os.getuid()) and not st.st_mode & 0o022
    done = processes.run(["/bin/sh", "-c", "echo $0 ran", "the command"], 30)
    assert (done.returncode, done.out) == (0, "the command ran\n")


def test_a_child_is_started_without_a_fork_of_the_whole_process() -> None:
    """Python forks for a `preexec_fn` (the child a copy of this process until it execs) and
    vforks without one: the child then never runs Python. Counted by the at-fork hooks,
    which run only for a fork."""
    forks: list[int] = []
    os.register_at_fork(after_in_parent=lambda: forks.append(1))
    for _ in range(3):
        assert processes.run(["/bin/true"], 30).returncode == 0
    assert forks == []


@pytest.mark.parametrize("kind", ["missing", "plain text", "not executable", "a folder"])
def test_a_command_that_cannot_start_raises_as_python_s_start_does(
    tmp_path: Path, kind: str
) -> None:
    target = tmp_path / "cmd"
    if kind == "plain text":
        target.write_text("echo not a binary\n")
        target.chmod(0o755)
    elif kind == "not executable":
        target.write_text("#!/bin/sh\necho hi\n")
    elif kind == "a folder":
        target.mkdir()
    with pytest.raises(OSError) as python_s:
        subprocess.Popen([str(target)])
    with pytest.raises(OSError) as warm_s:
        processes.run([str(target), "x"], 30)
    assert type(warm_s.value) is type(python_s.value)
    assert str(warm_s.value) == str(python_s.value)
    assert warm_s.value.errno in (errno.ENOENT, errno.ENOEXEC, errno.EACCES)


def test_a_bare_name_is_found_on_the_child_s_path_as_python_finds_it(tmp_path: Path) -> None:
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    (first / "tool").write_text("#!/bin/sh\necho no\n")  # not executable: skipped on (EACCES)
    (second / "tool").write_text("#!/bin/sh\necho found $1\n")
    (second / "tool").chmod(0o755)
    environ = dict(os.environ, PATH=f"{first}:{tmp_path / 'none'}:{second}")
    done = processes.run(["tool", "it"], 30, environ=environ)
    assert (done.returncode, done.out) == (0, "found it\n")
    with pytest.raises(OSError) as warm_s:
        processes.run(["no-such-tool-57"], 30, environ=environ)
    assert warm_s.value.errno == errno.ENOENT and warm_s.value.filename == "no-such-tool-57"


def test_the_helper_refuses_to_run_the_command_for_a_parent_that_is_gone(tmp_path: Path) -> None:
    """Its parent check: started for a parent that is not its parent (one that died before
    the signal was armed), it exits 1 and runs nothing."""
    helper = tied_start.helper_path()
    assert helper is not None
    marker = tmp_path / "ran"
    read, write = os.pipe()
    gone = str(os.getppid())  # (never its parent, this process; pid 1 is, where pytest is 1)
    touch = [sys.executable, "python", "-c", f"open({str(marker)!r}, 'w')"]
    argv = [helper, gone, str(write), "1", *touch]
    done = subprocess.run(argv, pass_fds=(write,), timeout=30)
    os.close(write)
    os.close(read)
    assert done.returncode == 1 and not marker.exists()


KILLED = r"""
import os, sys, threading, time
from warmcli.backends import processes, tied_start
assert tied_start.helper_path() is not None
started = []
processes.on_compiler(lambda pgid, on: on and started.append(pgid))
threading.Thread(target=processes.run, args=(["/bin/sleep", "60"], None), daemon=True).start()
while not started:
    time.sleep(0.01)
print(started[0], flush=True)
time.sleep(60)
"""


def test_a_compiler_started_by_the_helper_dies_with_a_sigkilled_warm() -> None:
    proc = subprocess.Popen([sys.executable, "-c", KILLED], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        assert _alive(child)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(child)
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize("fake", ["exits before it reads its arguments", "cannot be executed"])
def test_a_helper_that_does_not_run_as_built_falls_back_to_the_preexec_fn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake: str
) -> None:
    """Fakes for a helper whose loader refuses it (built where another C library is) and one
    on a noexec mount: the command still runs, tied by the `preexec_fn`, and this process
    stops asking the helper."""
    helper = tmp_path / "warm-tie-fake"
    helper.write_text("#!/bin/sh\nexit 127\n")
    helper.chmod(0o755 if fake.startswith("exits") else 0o644)
    monkeypatch.setattr(tied_start._Helper, "looked", True)
    monkeypatch.setattr(tied_start._Helper, "path", str(helper))
    done = processes.run(["/bin/sh", "-c", "echo ran"], 30)
    assert (done.returncode, done.out) == (0, "ran\n")
    assert tied_start.helper_path() is None


def test_the_helper_is_built_by_the_system_compiler_never_path_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `cc` on PATH (a user's wrapper, a test's fake) is never run to build it; a copy
    others may write is built again, never run."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "cc").write_text(f"#!/bin/sh\ntouch {tmp_path / 'fake-ran'}\nexit 1\n")
    (fake / "cc").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    folder = tmp_path / "cache"
    monkeypatch.setattr(tied_start, "_folders", lambda: [str(folder)])
    made = tied_start._find_or_make()
    assert made is not None and Path(made).parent == folder
    assert not (tmp_path / "fake-ran").exists()
    os.chmod(made, 0o777)
    again = tied_start._find_or_make()
    assert again == made and not os.stat(made).st_mode & 0o022
    assert [p.name for p in folder.iterdir()] == [Path(made).name]  # nothing else left
