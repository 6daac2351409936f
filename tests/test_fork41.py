"""A child forked while another thread of its parent reads the bundle for longer than a fork
waits (`warmcli.forking.HOLD_SECONDS`): SQLite's own mutexes may be held by that thread,
which the child lacks, so a child that opened a connection could wait for ever (CI saw the
child of `test_production_lifecycle`'s fork-while-reading hang, about 1 run in 4 on two
loaded cores; stop 40's warm alike). Such a child uses no SQLite: it runs cold, one line
said, and its results are a cold start's. Real processes, a real bundle, the real cc."""

from __future__ import annotations

from pathlib import Path

from conftest import Warm
from test_production_lifecycle import CHILD_WAITED, produce, script, warmed

FORK_PAST_THE_WAIT = (
    """
import os, sys, threading, time, warmcli, kernels
from warmcli import forking, production
forking.HOLD_SECONDS = 0.2  # (the fork waits 5 s for a read; this one lasts longer)
rt = warmcli.runtime("host")
kernels.run(rt, 0)  # served: the bundle is open
slow = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 15000000) "
reading = threading.Thread(target=production.bundle()._one, args=(slow + "SELECT count(*) FROM c",))
reading.start()
time.sleep(0.3)
pid = os.fork()
if pid == 0:
    try:
        kernels.run(rt, 1)  # in the bundle, but not read here: compiled
        done = warmcli.report()
        print("child compiled", len(done.kernels), flush=True)
    except BaseException as exc:
        print("child raised", repr(exc), flush=True)
        os._exit(1)
    os._exit(0)
"""
    + CHILD_WAITED
    + "sys.stdout.flush()\nos._exit(0)\n"
)


def test_a_child_forked_past_the_wait_for_a_read_runs_cold_never_hangs(
    warm: Warm, tmp_path: Path, bundle_path: Path
) -> None:
    warmed(warm, tmp_path, bundle_path, 0, 1)
    done = produce(
        warm, script(tmp_path, FORK_PAST_THE_WAIT), WARM_BUNDLE=str(bundle_path), WARM_EXPLAIN="1"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "child compiled 1\nchild exit 0\n", done.stdout + done.stderr
    assert "forked while another thread read the bundle for over 5 s" in done.stderr  # EXPLAIN
