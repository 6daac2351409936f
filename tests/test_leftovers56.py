"""What warm's own processes leave in the temporary folder: a private `warm-host-*` folder (where
warm's home cannot hold host libraries) and a Dask shard's `warm-shard-*` folder. Nothing where a
process ends by returning; what one ended by `os._exit`, SIGTERM or SIGKILL left is removed by the
next process that makes such a folder, never a living process's (nor one its shard's process or
forked child still holds); a descriptor a program reused is never closed under it. A fix's test
failed before it (those of what is left alone guard it). Real processes, a real C compiler, a
real `dlopen`, a real `warm run`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A production process launching a host kernel, then ending as `argv[1]` says.
PRODUCTION = """
import os, signal, sys, time
import numpy as np
import warmcli
from warmcli import Kernel
warmcli.use_bundle(None)
rt = warmcli.runtime()
x = rt.upload(np.arange(4, dtype=np.float32))
rt.launch(Kernel("void f(float *x, int n) { for (int j = 0; j < n; j++) x[j] *= 2.0f; }",
                 "f", "Pi"), x, 4)
print(rt.read(x).tolist(), flush=True)
how = sys.argv[1]
if how == "os._exit":
    os._exit(0)
if how == "SIGKILL":
    os.kill(os.getpid(), signal.SIGKILL)
if how == "SIGTERM":
    os.kill(os.getpid(), signal.SIGTERM)
if how == "wait":
    sys.stdin.read()
"""

# A library cache used and dropped, never closed: the process ends normally.
DROPPED = """
import subprocess, sys
from warmcli.backends.host.libraries import LibraryCache
source, out = sys.argv[1], sys.argv[2]
subprocess.run(["cc", "-shared", "-fPIC", "-o", out, source], check=True)
print(LibraryCache().load(open(out, "rb").read()).answer())
"""


@pytest.fixture(name="env")
def private_libraries_env(tmp_path: Path) -> dict[str, str]:
    """A warm home whose `host-libraries` others may write (so a private folder is used),
    and a temporary folder of the test's own."""
    home = tmp_path / "home"
    (home / "host-libraries").mkdir(parents=True)
    (home / "host-libraries").chmod(0o777)
    (tmp_path / "tmp").mkdir()
    return dict(os.environ, WARM_HOME=str(home), TMPDIR=str(tmp_path / "tmp"), PYTHONPATH=str(ROOT))


def _left(env: dict[str, str]) -> list[str]:
    return sorted(n for n in os.listdir(env["TMPDIR"]) if n.startswith("warm-host-"))


def _production(env: dict[str, str], how: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", PRODUCTION, how], env=env, capture_output=True, text=True,
        timeout=120, cwd=ROOT,
    )  # fmt: skip


def _aged(env: dict[str, str]) -> None:
    """Every folder in the test's temporary folder dated a day back (a dead process's)."""
    past = time.time() - 86400
    for name in os.listdir(env["TMPDIR"]):
        os.utime(os.path.join(env["TMPDIR"], name), (past, past))


def test_a_dropped_library_cache_leaves_no_folder_at_a_normal_end(
    env: dict[str, str], tmp_path: Path
) -> None:
    # A cache collected, or left at exit, without `close` (a `Runtime(HostDevice())` never
    # closed) left its private folder and the library in it for ever.
    source = tmp_path / "k.c"
    source.write_text("int answer(void) { return 5; }\n")
    done = subprocess.run(
        [sys.executable, "-c", DROPPED, str(source), str(tmp_path / "k.so")],
        env=env, capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (0, "5\n"), done.stderr
    assert _left(env) == []


@pytest.mark.parametrize("how", ["os._exit", "SIGKILL", "SIGTERM"])
def test_what_a_dead_process_left_the_next_one_removes(env: dict[str, str], how: str) -> None:
    dead = _production(env, how)
    assert dead.stdout == "[0.0, 2.0, 4.0, 6.0]\n", dead.stderr
    (left,) = _left(env)  # no exit function ran: its folder stays
    _aged(env)
    done = _production(env, "return")
    assert (done.returncode, done.stdout) == (0, dead.stdout), done.stderr
    assert left not in _left(env)
    assert _left(env) == []  # its own removed at its end


def test_a_living_process_s_folder_is_left_alone(env: dict[str, str]) -> None:
    # A process still running (waiting on its stdin) keeps its folder, however old it is,
    # while another process makes one of its own beside it.
    living = subprocess.Popen(
        [sys.executable, "-c", PRODUCTION, "wait"], env=env, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        assert living.stdout is not None
        assert living.stdout.readline() == "[0.0, 2.0, 4.0, 6.0]\n"
        (held,) = _left(env)
        _aged(env)
        done = _production(env, "return")
        assert done.returncode == 0, done.stderr
        assert _left(env) == [held]
        assert any(Path(env["TMPDIR"], held).iterdir())  # its library still there
    finally:
        _, err = living.communicate("", timeout=120)
    assert living.returncode == 0, err
    assert _left(env) == []


def test_a_folder_not_known_to_be_warm_s_is_left_alone(env: dict[str, str]) -> None:
    # A folder named as warm's that no held folder of warm's could be (an earlier warm's,
    # whose owner nothing tells; a link; one of another name) is never removed.
    tmp = Path(env["TMPDIR"])
    (tmp / "warm-host-abcd1234").mkdir(mode=0o700)
    (tmp / "warm-host-abcd1234" / "x.so").write_bytes(b"x")
    (tmp / "warm-host-link.held").symlink_to(tmp / "warm-host-abcd1234")
    _aged(env)
    done = _production(env, "return")
    assert done.returncode == 0, done.stderr
    assert _left(env) == ["warm-host-abcd1234", "warm-host-link.held"]
    assert (tmp / "warm-host-abcd1234" / "x.so").exists()


def test_a_sigterm_s_folder_is_not_removed_by_its_own_forked_child(env: dict[str, str]) -> None:
    # A child forked without exec holds its parent's lock too: while it lives, the folder
    # of its dead parent stays (the child may still use libraries loaded from it).
    code = PRODUCTION.replace(
        "how = sys.argv[1]",
        "how = sys.argv[1]\nif os.fork() == 0:\n    sys.stdin.read()\n    os._exit(0)",
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", code, "SIGTERM"], env=env, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    try:
        assert parent.wait(timeout=120) == -signal.SIGTERM
        (held,) = _left(env)
        _aged(env)
        done = _production(env, "return")
        assert done.returncode == 0, done.stderr
        assert _left(env) == [held]
    finally:
        assert parent.stdin is not None and parent.stdout is not None
        parent.stdin.close()  # the child reads its end: it ends
    parent.stdout.read()  # to its end: the child, which holds the pipe too, has ended
    _aged(env)
    done = _production(env, "return")
    assert done.returncode == 0, done.stderr
    assert _left(env) == []


# A shard's workload: where MARK is set, it says it has started and waits to be killed.
STALLS = """
import os, time
if os.environ.get("MARK"):
    open(os.environ["MARK"], "w").close()
    time.sleep(120)
def workload(rt):
    pass
"""
SHARD = (  # a Dask worker's task, run in a process of its own: the shard's exit code
    "import sys; from warmcli.warming.fanout import run_shard; "
    "print(run_shard(sys.argv[1:], '0/1')[0])"
)


def _shards(env: dict[str, str]) -> list[str]:
    return sorted(n for n in os.listdir(env["TMPDIR"]) if n.startswith("warm-shard-"))


def _gone(group: int) -> bool:
    """Whether no process of process group `group` is left but a zombie (its descriptors
    closed: its locks let go)."""
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == group and fields[0] != "Z":
            return False
    return True


def test_a_shard_killed_with_its_worker_is_removed_by_the_next_not_while_it_runs(
    env: dict[str, str], tmp_path: Path
) -> None:
    # A Dask worker killed (SIGKILL) while its shard ran left the shard's `warm-shard-*`
    # folder in its TMPDIR for ever; while the shard's own `warm run` still runs (its worker
    # alone killed), the folder it writes its bundle into is its own: kept.
    workload, mark = tmp_path / "stalls.py", tmp_path / "started"
    workload.write_text(STALLS)
    worker = subprocess.Popen(
        [sys.executable, "-c", SHARD, str(workload), "-q", "--no-verify"],
        env=dict(env, MARK=str(mark)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        cwd=tmp_path, start_new_session=True,
    )  # fmt: skip
    try:
        for _ in range(1200):
            if mark.exists() or worker.poll() is not None:
                break
            time.sleep(0.1)
        assert mark.exists(), "the shard never started"
        (left,) = _shards(env)
        os.kill(worker.pid, signal.SIGKILL)  # the worker alone: its shard's process runs on
        worker.wait()
        _aged(env)
        other = [sys.executable, "-c", SHARD, str(workload), "-q", "--no-verify"]
        done = subprocess.run(other, env=env, capture_output=True, text=True, cwd=tmp_path)
        assert (done.returncode, done.stdout) == (0, "0\n"), done.stderr
        assert _shards(env) == [left]
    finally:
        os.killpg(worker.pid, signal.SIGKILL)  # and now the shard's processes
    for _ in range(1200):
        if _gone(worker.pid):
            break
        time.sleep(0.1)
    _aged(env)
    done = subprocess.run(other, env=env, capture_output=True, text=True, cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, "0\n"), done.stderr
    assert _shards(env) == []


def test_a_descriptor_a_program_reused_is_not_closed_under_it(
    env: dict[str, str], tmp_path: Path
) -> None:
    # A daemon closes every descriptor (`closerange`) and opens its log, which takes the
    # number of the folder's lock: at exit that descriptor was closed as the folder's, and
    # the log's last buffered lines were lost.
    log = tmp_path / "log.txt"
    code = PRODUCTION + (
        "def names(n):\n"
        "    try:\n"
        "        return os.readlink(f'/proc/self/fd/{n}')\n"
        "    except OSError:\n"
        "        return ''\n"
        "held = [int(n) for n in os.listdir('/proc/self/fd') if 'warm-host-' in names(n)]\n"
        "os.closerange(3, max(held) + 1)\n"
        f"fd = os.open({str(log)!r}, os.O_WRONLY | os.O_CREAT)\n"
        "os.dup2(fd, max(held))\n"
        "logged = open(max(held), 'w')\n"
        "logged.write('last words')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, "return"], env=env, capture_output=True, text=True,
        timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert log.read_text() == "last words", done.stderr
