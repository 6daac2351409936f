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
