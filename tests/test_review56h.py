"""Review 56h: a process's held folder (`warmcli.scratch.HeldFolder`) is never removed while its
process may still write into it, and a host kernel whose assembly reads a file is found however
its string literals spell the directive. Each test failed before its fix. Real processes, a real
C compiler, a real `dlopen`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Ages every folder in the temporary folder (a dead process's, by its date) and runs another
# process's `remove_orphans`, as the next process making a held folder does.
ORPHANS_REMOVED = """
import os, subprocess, sys, time
def orphans_removed():
    tmp, past = os.environ["TMPDIR"], time.time() - 86400
    for name in os.listdir(tmp):
        os.utime(os.path.join(tmp, name), (past, past))
    other = "from warmcli.scratch import remove_orphans; remove_orphans('warm-host-')"
    subprocess.run([sys.executable, "-c", other], check=True)
"""

# A daemon: a library loaded from its private folder, then every descriptor closed (the
# folder's lock with them), then, once another process removed what it took for an orphan,
# another library loaded.
DAEMON = (
    ORPHANS_REMOVED
    + """
from warmcli.backends.host.libraries import LibraryCache
def binary(n):
    source, out = f"k{n}.c", f"k{n}.so"
    open(source, "w").write(f"int answer(void) {{ return {n}; }}\\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", out, source], check=True)
    return open(out, "rb").read()
first, second = binary(1), binary(2)
cache = LibraryCache()
print(cache.load(first).answer())
os.closerange(3, 4096)
orphans_removed()
print(cache.load(second).answer())
"""
)

# A held folder made where no descriptor is left (EMFILE: its lock cannot be taken), then one
# freed, and another process's `remove_orphans`: whether the folder is still there.
NO_DESCRIPTOR = (
    ORPHANS_REMOVED
    + """
import fcntl, resource, shutil, tempfile  # (imported before: no descriptor is left after)
from warmcli.scratch import HeldFolder
tempfile.gettempdir()  # (found once, by a file it writes)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
filled = []
try:
    while True:
        filled.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
held = HeldFolder("warm-host-")
for fd in filled:
    os.close(fd)
orphans_removed()
print(os.path.isdir(held.path), held.held())
"""
)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """A warm home whose `host-libraries` others may write (so a private folder is used),
    and a temporary folder of the test's own."""
    home = tmp_path / "home"
    (home / "host-libraries").mkdir(parents=True)
    (home / "host-libraries").chmod(0o777)
    (tmp_path / "tmp").mkdir()
    return dict(os.environ, WARM_HOME=str(home), TMPDIR=str(tmp_path / "tmp"), PYTHONPATH=str(ROOT))


def _run(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
        cwd=cwd,
    )  # fmt: skip


def test_a_daemon_that_closed_every_descriptor_still_loads_its_next_library(
    env: dict[str, str], tmp_path: Path
) -> None:
    # Its `closerange` let the folder's lock go: another process removed the folder as a dead
    # one's, and the daemon's next load raised FileNotFoundError writing into it.
    done = _run(DAEMON, env, tmp_path)
    assert (done.returncode, done.stdout) == (0, "1\n2\n"), done.stderr
    assert os.listdir(env["TMPDIR"]) == []  # its second folder removed at its end


def test_a_folder_whose_lock_could_not_be_taken_is_no_one_else_s_to_remove(
    env: dict[str, str], tmp_path: Path
) -> None:
    # Made where no descriptor was left, its folder was named as held yet held by no lock: the
    # next process removed it under its living maker.
    done = _run(NO_DESCRIPTOR, env, tmp_path)
    assert (done.returncode, done.stdout) == (0, "True True\n"), done.stderr
    assert os.listdir(env["TMPDIR"]) == []  # removed by its maker at its end
