"""A production process's life around warm, in real subprocesses with the system cc: a
child forked while another thread held warm's locks, a compile at interpreter shutdown,
a bundle replaced by another file, an interrupted write-back at exit, a refused `use_bundle`,
a write-back that another writer keeps waiting, a forked child that exits through atexit, a
bundle URL whose local copy has nowhere to go, a runtime used after `use_bundle` closed it,
a relative bundle path and a process that changes its working folder."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, Warm

KERNELS = """
import numpy as np
from warmcli import Kernel

def add(i):
    return Kernel(
        f"void add{i}(const float *a, float *out, int n) "
        f"{{ for (int j = 0; j < n; j++) out[j] = a[j] + {i}.0f; }}",
        f"add{i}",
        "PPi",
    )

def run(rt, i, n=16):
    a = rt.upload(np.arange(n, dtype=np.float32))
    out = rt.buffer(n)
    rt.launch(add(i), a, out, n)
    assert np.array_equal(rt.read(out), np.arange(n, dtype=np.float32) + i), i
"""


def script(tmp_path: Path, body: str) -> list[str]:
    (tmp_path / "kernels.py").write_text(KERNELS)
    path = tmp_path / "prod.py"
    path.write_text(f"import sys\nsys.path.insert(0, {str(tmp_path)!r})\n" + body)
    return [sys.executable, str(path)]


def slow_cc(tmp_path: Path, seconds: float, started: Path | None = None) -> str:
    """A cc that takes `seconds` over each compile (its `--version` at once), making the
    file `started` (where given) as each compile begins."""
    path = tmp_path / "slowcc"
    mark = f": > {str(started)!r}; " if started else ""
    path.write_text(
        f'#!/bin/sh\ncase "$*" in *--version*) ;; *) {mark}sleep {seconds} ;; esac\nexec cc "$@"\n'
    )
    path.chmod(0o755)
    return str(path)


def produce(
    warm: Warm, argv: list[str], timeout: float = 120, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, env=dict(warm.env, **env), timeout=timeout, cwd=ROOT
    )


def warmed(warm: Warm, tmp_path: Path, bundle: Path, *kernels: int) -> None:
    """`bundle` holding `kernels`, written back by a production process."""
    argv = script(
        tmp_path,
        "import warmcli, kernels\nrt = warmcli.runtime('host')\n"
        f"for i in {kernels!r}: kernels.run(rt, i)\n",
    )
    done = produce(warm, argv, WARM_BUNDLE=str(bundle), WARM_BUNDLE_WRITE="1")
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def warmed_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folders `k0` and `k01`, each `b.warm` (and what its write-back left beside it)
    holding kernel 0 (and 1), written back by a production process, and `home`, the warm
    home it ran in: made once for the module, copied by `copied` for each test."""
    base = tmp_path_factory.mktemp("lifecycle")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    for kernels in ((0,), (0, 1)):
        folder = base / ("k" + "".join(map(str, kernels)))
        folder.mkdir()
        warm = Warm(dict(env, WARM_HOME=str(folder / "home"), COLUMNS="200"))
        warmed(warm, folder, folder / "b.warm", *kernels)
    return base


def copied(warm: Warm, once: Path, bundle: Path, *kernels: int) -> None:
    """`bundle` holding `kernels`, as `warmed` leaves it: the one `warmed_once` made
    (`once`) copied there (with its `-journal`, `.lock` beside it, if any), and its warm
    home into `warm`'s."""
    folder = once / ("k" + "".join(map(str, kernels)))
    for made in folder.glob("b.warm*"):
        shutil.copy2(made, f"{bundle}{made.name[len('b.warm') :]}")
    shutil.copytree(folder / "home", warm.env["WARM_HOME"], dirs_exist_ok=True, symlinks=True)


# The parent waits 30 s at most for its forked child, and says how it ended (or that it hung).
CHILD_WAITED = """
deadline = time.time() + 30
while time.time() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        print("child exit", os.waitstatus_to_exitcode(status))
        break
    time.sleep(0.05)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print("child hung")
"""

FORK_WHILE_COMPILING = (
    """
import os, threading, time, warmcli, kernels
rt = warmcli.runtime("host")
kernels.run(rt, 0)  # served: the bundle is open
compiling = threading.Thread(target=kernels.run, args=(rt, 5))  # a miss: the slow cc
compiling.start()
while not os.path.exists(os.environ["CC_STARTED"]):  # (made by the slow cc as it starts)
    time.sleep(0.01)
time.sleep(0.1)  # fork while that thread compiles, holding the kernel cache's lock
pid = os.fork()
if pid == 0:
    try:
        kernels.run(rt, 1)  # served, in the child
        kernels.run(rt, 6)  # compiled, in the child
    except BaseException:
        os._exit(1)
    os._exit(0)
"""
    + CHILD_WAITED
    + "compiling.join()\n"
)


def test_a_child_forked_while_another_thread_compiles_serves_and_compiles(
    warm: Warm, tmp_path: Path, bundle_path: Path, warmed_once: Path
) -> None:
    copied(warm, warmed_once, bundle_path, 0, 1)
    argv = script(tmp_path, FORK_WHILE_COMPILING)
    started = tmp_path / "cc-started"
    cc = slow_cc(tmp_path, 0.5, started)  # (the fork 0.1 s into it; the child's compile too)
    done = produce(warm, argv, WARM_BUNDLE=str(bundle_path), WARM_CC=cc, CC_STARTED=str(started))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "child exit 0\n", done.stdout + done.stderr


FORK_WHILE_READING = (
    """
import os, sys, threading, time, warmcli, kernels
from warmcli import production
rt = warmcli.runtime("host")
kernels.run(rt, 0)  # served: the bundle is open
# A read still running as the fork begins, which waits for it to end (up to
# `forking.HOLD_SECONDS`, 5 s; a read that outlasts the wait is test_fork41's case): the fork
# comes once the read holds the bundle (its lock taken), so the read need only outlast that
# instant (3,000,000 rows: a fraction of a second to seconds; 15,000,000 after a fixed
# 0.5 s sleep held every run's fork for seconds more).
slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) "
held = production.bundle()._lock
reading = threading.Thread(target=production.bundle()._one, args=(slow + "SELECT count(*) FROM c",))
reading.start()  # a long read: SQLite holds the connection for it
while reading.is_alive() and held.acquire(blocking=False):  # not taken by the read yet
    held.release()
    time.sleep(0.001)
if not reading.is_alive():
    print("the read ended before the fork")
pid = os.fork()
if pid == 0:
    try:
        kernels.run(rt, 1)  # served, in the child: read from the bundle
    except BaseException:
        os._exit(1)
    os._exit(0)
"""
    + CHILD_WAITED
    # (judged: the parent ends now, never waiting seconds for the long read to finish)
    + "sys.stdout.flush()\nos._exit(0)\n"
)


def test_a_child_forked_while_another_thread_reads_the_bundle_serves(
    warm: Warm, tmp_path: Path, bundle_path: Path, warmed_once: Path
) -> None:
    copied(warm, warmed_once, bundle_path, 0, 1)
    done = produce(warm, script(tmp_path, FORK_WHILE_READING), WARM_BUNDLE=str(bundle_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "child exit 0\n", done.stdout + done.stderr


AT_EXIT = """
import atexit, threading, warmcli, kernels
rt = warmcli.runtime("host")
kernels.run(rt, 0)

def daemon():
    threading.Event().wait(0.3)
    kernels.run(rt, 2)  # compiled while the interpreter shuts down
    print("daemon done", flush=True)

def last():
    kernels.run(rt, 1)  # compiled in an atexit callback
    print("at exit done", flush=True)
    threading.Event().wait(1.0)  # the daemon thread compiles meanwhile

atexit.register(last)
threading.Thread(target=daemon, daemon=True).start()
"""


def test_a_kernel_compiled_at_interpreter_shutdown_is_right(
    warm: Warm, tmp_path: Path, bundle_path: Path, warmed_once: Path
) -> None:
    copied(warm, warmed_once, bundle_path, 0)
    done = produce(warm, script(tmp_path, AT_EXIT), WARM_BUNDLE=str(bundle_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "at exit done\ndaemon done\n", done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr


REPLACED = """
import os, sys, warmcli, kernels
rt = warmcli.runtime("host")
kernels.run(rt, 0)
kernels.run(rt, 6)
with open(os.environ["WARM_BUNDLE"], "w") as replaced:  # no bundle any more
    replaced.write("not a bundle\\n")
kernels.run(rt, 7)
print(len(warmcli.report().kernels))
"""


def test_a_bundle_replaced_by_another_file_is_reported_in_one_line(
    warm: Warm, tmp_path: Path, bundle_path: Path, warmed_once: Path
) -> None:
    copied(warm, warmed_once, bundle_path, 0)
    done = produce(
        warm,
        script(tmp_path, REPLACED),
        WARM_BUNDLE=str(bundle_path),
        WARM_BUNDLE_WRITE="1",
        WARM_REPORT="1",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "2\n", done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "lacked 2 kernel(s)" in done.stderr and "NOT written back" in done.stderr
    assert bundle_path.read_text() == "not a bundle\n"  # the file there is left as it is


def test_an_interrupt_while_writing_back_at_exit_is_one_line(
    warm: Warm, tmp_path: Path, bundle_path: Path, warmed_once: Path
) -> None:
    copied(warm, warmed_once, bundle_path, 0)
    before = bundle_path.read_bytes()
    body = "import warmcli, kernels\nkernels.run(warmcli.runtime('host'), 6)\nprint('ran')\n"
    argv = script(tmp_path, body)
    argv[1:1] = ["-u"]
    with open(f"{bundle_path}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another writer: the write-back waits at exit
        proc = subprocess.Popen(
            argv,
            env=dict(warm.env, WARM_BUNDLE=str(bundle_path), WARM_BUNDLE_WRITE="1"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        assert proc.stdout.readline() == "ran\n"  # (-u: printed at once) compiled, then
        time.sleep(1)  # its write-back at exit waiting for the lock
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert err == "warm: could not write back into the bundle: interrupted\n", err
    assert bundle_path.read_bytes() == before
    assert warm("verify", bundle_path).returncode == 0


FAILED_USE = """
import sys, warmcli, kernels
try:
    warmcli.use_bundle(sys.argv[1], write=True)
except warmcli.BundleError as exc:
    print("refused", flush=True)
kernels.run(warmcli.runtime("host"), 6)
"""


def test_a_bundle_use_bundle_refused_is_not_reported_as_written(warm: Warm, tmp_path: Path) -> None:
    text = tmp_path / "notes.warm"
    text.write_text("not a bundle\n")
    argv = [*script(tmp_path, FAILED_USE), str(text)]
    done = produce(warm, argv, WARM_REPORT="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "refused\n"
    assert done.stderr.startswith("warm: no bundle is loaded: this process compiled 1 kernel"), (
        done.stderr
    )
    assert text.read_text() == "not a bundle\n"


def test_a_write_back_waits_for_another_writer_a_bounded_time(
    warm: Warm, tmp_path: Path, bundle_path: Path, warmed_once: Path
) -> None:
    copied(warm, warmed_once, bundle_path, 0)
    before = bundle_path.read_bytes()
    body = (
        "import warmcli, kernels\nfrom warmcli import production\n"
        "production.WRITE_BACK_WAIT_SECONDS = 2.0\n"
        "kernels.run(warmcli.runtime('host'), 6)\n"
    )
    with open(f"{bundle_path}.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a writer that never lets go
        started = time.monotonic()
        done = produce(
            warm,
            script(tmp_path, body),
            timeout=60,
            WARM_BUNDLE=str(bundle_path),
            WARM_BUNDLE_WRITE="1",
            WARM_REPORT="1",
        )
        took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert "NOT written back" in done.stderr and "another writer" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert 2 <= took < 20
    assert bundle_path.read_bytes() == before


CHILD_EXITS = """
import os, sys, warmcli, kernels
rt = warmcli.runtime("host")
kernels.run(rt, 0)
pid = os.fork()
if pid == 0:
    kernels.run(rt, 1)
    sys.exit(0)  # through atexit: warm closes what the child holds
os.waitpid(pid, 0)
kernels.run(rt, 2)  # the parent loads another kernel after its child ended
print("parent done")
"""


def test_a_forked_child_that_exits_leaves_its_parent_able_to_load_kernels(
    warm: Warm, tmp_path: Path
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")  # WARM_HOME cannot be made: kernels load from a private folder
    done = produce(
        warm, script(tmp_path, CHILD_EXITS), WARM_HOME=str(blocked / "home"), WARM_BUNDLE=""
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "parent done\n"


def test_a_bundle_url_where_warm_home_cannot_be_made_is_one_warm_error(
    warm: Warm, tmp_path: Path
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    body = "import warmcli\nwarmcli.runtime('host')\n"
    done = produce(
        warm,
        script(tmp_path, body),
        WARM_HOME=str(blocked / "home"),
        WARM_BUNDLE="http://127.0.0.1:9/b.warm",
    )
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("warmcli.errors.RemoteError: http://127.0.0.1:9/b.warm: "), done.stderr
    assert "Not a directory" in last


OLD_RUNTIME = """
import warmcli, kernels
old = warmcli.runtime("host")
kernels.run(old, 0)
warmcli.use_bundle(None)  # closes `old`, and the bundle it served from
kernels.run(old, 1)  # in the bundle, which is closed now: compiled
"""


def test_a_runtime_used_after_use_bundle_closed_it_is_not_called_corrupt(
    warm: Warm, tmp_path: Path, bundle_path: Path, warmed_once: Path
) -> None:
    copied(warm, warmed_once, bundle_path, 0, 1)
    done = produce(
        warm, script(tmp_path, OLD_RUNTIME), WARM_BUNDLE=str(bundle_path), WARM_EXPLAIN="1"
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # a closed runtime's misses are nobody's: not even explained


FORK_HOLDING = """
import os, warmcli, kernels
from warmcli import production
rt = warmcli.runtime("host")
kernels.run(rt, 0)
with production.bundle().snapshot():  # this thread holds the bundle's lock: forks in it
    pid = os.fork()
if pid == 0:
    try:
        kernels.run(rt, 1)
    except BaseException:
        os._exit(1)
    os._exit(0)
print("child exit", os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
"""


def test_a_child_forked_by_a_thread_holding_the_bundle_lock_goes_on(
    warm: Warm, tmp_path: Path, bundle_path: Path, warmed_once: Path
) -> None:
    copied(warm, warmed_once, bundle_path, 0, 1)
    done = produce(warm, script(tmp_path, FORK_HOLDING), WARM_BUNDLE=str(bundle_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == "child exit 0\n", done.stdout + done.stderr


def test_a_relative_bundle_is_written_back_where_it_was_after_a_chdir(
    warm: Warm, tmp_path: Path, warmed_once: Path
) -> None:
    here, elsewhere = tmp_path / "here", tmp_path / "elsewhere"
    here.mkdir()
    elsewhere.mkdir()
    copied(warm, warmed_once, here / "b.warm", 0)
    body = (
        "import os, sys, warmcli, kernels\nrt = warmcli.runtime('host')\n"
        "kernels.run(rt, 6)\nos.chdir(sys.argv[1])  # as a daemon does\n"
    )
    argv = [*script(tmp_path, body), str(elsewhere)]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=here,
        env=dict(warm.env, WARM_BUNDLE="b.warm", WARM_BUNDLE_WRITE="1", WARM_REPORT="1"),
    )
    assert done.returncode == 0, done.stderr
    assert "written back into it" in done.stderr, done.stderr
    assert list(elsewhere.iterdir()) == []
    kernels = warm.json("stats", here / "b.warm")["kernels"]
    assert sorted(k["label"] for k in kernels) == ["add0", "add6"]
