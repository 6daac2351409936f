"""Review of stop 41's fork past the wait for a read (`forking.sqlite_unsafe`): what
`WARM_EXPLAIN` calls a miss of an entry this process could not read, a bundle not read in a
child forked while another thread read it for over 5 s (`unread`) or one another process kept
locked past the wait (`locked`): neither is a corrupt entry. Real processes, a real bundle,
the real cc, SQLite's real lock taken by another process."""

from __future__ import annotations

from pathlib import Path

from conftest import Warm
from test_fork41 import FORK_PAST_THE_WAIT
from test_production_lifecycle import produce, script, warmed

LOCKED_READ = """
import subprocess, sys, warmcli, kernels
from warmcli.bundle import file as bundle_file
bundle_file.LOCK_WAIT_SECONDS = 0.5
rt = warmcli.runtime("host")
kernels.run(rt, 0)  # served: the bundle is open
locker = subprocess.Popen(
    [sys.executable, "-c", "import sqlite3, sys, time\\n"
     "c = sqlite3.connect(sys.argv[1], isolation_level=None)\\n"
     "c.execute('BEGIN EXCLUSIVE')\\nprint('locked', flush=True)\\ntime.sleep(30)\\n",
     warmcli.production.bundle().fspath],
    stdout=subprocess.PIPE, text=True,
)
assert locker.stdout.readline() == "locked\\n"
try:
    kernels.run(rt, 1)  # in the bundle, but locked: compiled
    print("compiled", len(warmcli.report().kernels), flush=True)
finally:
    locker.kill()
    locker.wait()
"""


def _explained(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("warm: miss: kernel")]


def test_a_child_forked_past_the_wait_explains_its_miss_as_unread_not_corrupt(
    warm: Warm, tmp_path: Path, bundle_path: Path
) -> None:
    warmed(warm, tmp_path, bundle_path, 0, 1)
    done = produce(
        warm, script(tmp_path, FORK_PAST_THE_WAIT), WARM_BUNDLE=str(bundle_path), WARM_EXPLAIN="1"
    )
    assert done.stdout == "child compiled 1\nchild exit 0\n", done.stdout + done.stderr
    lines = _explained(done.stderr)
    assert len(lines) == 1 and "corrupt" not in lines[0], done.stderr
    assert lines[0].startswith("warm: miss: kernel add1: unread: not read in this process"), lines


def test_a_read_another_process_kept_locked_explains_its_miss_as_locked_not_corrupt(
    warm: Warm, tmp_path: Path, bundle_path: Path
) -> None:
    warmed(warm, tmp_path, bundle_path, 0, 1)
    done = produce(
        warm, script(tmp_path, LOCKED_READ), WARM_BUNDLE=str(bundle_path), WARM_EXPLAIN="1"
    )
    assert done.returncode == 0 and done.stdout == "compiled 1\n", done.stdout + done.stderr
    lines = _explained(done.stderr)
    assert len(lines) == 1 and "corrupt" not in lines[0], done.stderr
    assert lines[0].startswith("warm: miss: kernel add1: locked: locked by another process"), lines


FAMILY = """
import os, sys, threading, time, warmcli, kernels
from warmcli import forking, production
forking.HOLD_SECONDS = 0.2
rt = warmcli.runtime("host")
kernels.run(rt, 0)  # served: the bundle is open


def forked(name, then=None, k=1):
    pid = os.fork()
    if pid == 0:
        try:
            kernels.run(rt, k)  # not yet run in this process
            print(name, "compiled", len(warmcli.report().kernels), flush=True)
            if then is not None:
                then()
        except BaseException as exc:
            print(name, "raised", repr(exc), flush=True)
        os._exit(0)
    deadline = time.time() + 30
    while not os.waitpid(pid, os.WNOHANG)[0]:
        if time.time() > deadline:
            os.kill(pid, 9)
            print(name, "hung", flush=True)
            break
        time.sleep(0.05)


# a read of ~1.5 s (6M rows; 4 s loaded): past the 0.3 s sleep and the fork's 0.2 s wait with
# room, not the 15M rows (5 to 10 s) `reading.join()` waited out after the unsafe fork
slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 6000000) "
reading = threading.Thread(target=production.bundle()._one, args=(slow + "SELECT count(*) FROM c",))
reading.start()
time.sleep(0.3)
forked("unsafe", lambda: forked("its child", k=2))
reading.join()
forked("later", lambda: forked("later's child", k=2))
held = production.bundle()._lock
def brief():
    with held:
        time.sleep(0.1)
briefly = threading.Thread(target=brief)
briefly.start()
time.sleep(0.02)
forked("brief")
briefly.join()
"""


def test_only_a_child_forked_past_the_wait_and_its_own_children_run_cold(
    warm: Warm, tmp_path: Path, bundle_path: Path
) -> None:
    """Its children inherit the held mutexes: cold too. A later fork of the same parent (no
    thread reading: gunicorn's preload), its children, and a fork while a thread held the
    bundle's lock briefly are served, as before stop 41."""
    warmed(warm, tmp_path, bundle_path, 0, 1, 2)
    done = produce(warm, script(tmp_path, FAMILY), WARM_BUNDLE=str(bundle_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "unsafe compiled 1",
        "its child compiled 1",
        "later compiled 0",
        "later's child compiled 0",
        "brief compiled 0",
    ], done.stdout + done.stderr
