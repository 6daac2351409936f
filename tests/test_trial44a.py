"""Pre-fork trial (stop 44, real subprocesses, the system cc, a real SQLite lock): a worker
stopped by SIGTERM (a handler's `sys.exit`, as gunicorn's) while its at-exit report read
the bundle printed no report at all, though `WARM_REPORT=1` asked for one."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT, Warm

WORKER = """
import signal, sys
import numpy as np
import warmcli
from warmcli import Kernel

signal.signal(signal.SIGTERM, lambda sig, frame: sys.exit(0))  # as a gunicorn worker
rt = warmcli.runtime()
rt.launch(Kernel("void z44(float *y) { y[0] = 7; }", "z44", "P"), rt.upload(np.zeros(1, "f4")))
print("ready", flush=True)
sys.stdin.readline()
"""


def test_a_sigterm_while_the_exit_report_reads_the_bundle_still_prints_it(
    warm: Warm, tmp_path: Path, served: Path
) -> None:
    """The report read the bundle (its signatures) as it was made at exit, waiting for a
    writer's lock; a SIGTERM there cut it short, and `_at_exit` then printed only `could not
    write back into the bundle: interrupted`: what the worker lacked was said nowhere (one
    that lacked nothing said nothing, where a missing report means none was asked for). It
    is made again, reading no bundle, and says `NOT written back: interrupted`."""
    (tmp_path / "worker.py").write_text(WORKER)
    env = dict(warm.env, PYTHONPATH=str(ROOT), WARM_BUNDLE=str(served))
    env.update(WARM_BUNDLE_WRITE="1", WARM_REPORT="1")
    proc = subprocess.Popen(
        [sys.executable, "worker.py"], cwd=tmp_path, env=env, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdin is not None
    assert proc.stdout.readline() == "ready\n"
    lock = sqlite3.connect(served, isolation_level=None)  # a writer stopped mid-commit
    lock.execute("BEGIN EXCLUSIVE")
    try:
        proc.stdin.write("\n")
        proc.stdin.flush()  # the worker returns: its report reads the bundle, and waits
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    assert proc.returncode == 0, err
    head = f"warm: bundle {served} lacked 1 kernel(s) and 0 tune(s); this process compiled"
    assert f"{head} and tuned them itself (NOT written back: interrupted):\n" in err, err
    assert "\n  kernel z44 on host (key " in err, err
    assert "could not write back" not in err, err
    assert not os.path.exists(f"{served}-journal")


SLOW_WORKER = """
import signal, sys
import numpy as np
import warmcli
from warmcli import Kernel

signal.signal(signal.SIGTERM, lambda sig, frame: sys.exit(0))  # as a gunicorn worker
rt = warmcli.runtime()
rt.launch(Kernel("void z44(float *y) { y[0] = 7; }", "z44", "P"), rt.upload(np.zeros(1, "f4")))
"""


def test_a_worker_stopped_in_its_only_compile_does_not_say_it_wrote_it_back(
    warm: Warm, tmp_path: Path, served: Path
) -> None:
    """A worker SIGTERMed (a deploy) while it compiled the one kernel its bundle lacked said
    `lacked 1 kernel(s) ...; this process compiled and tuned them itself (written back into
    it):`, then `kernel z44 (compile interrupted: nothing stored)`: nothing was written."""
    from test_production_trial30b import SLOW_CC

    cc = tmp_path / "slowcc"
    (tmp_path / "slowcc.c").write_text(SLOW_CC)
    subprocess.run(["cc", "-o", str(cc), str(tmp_path / "slowcc.c")], check=True)
    (tmp_path / "worker.py").write_text(SLOW_WORKER)
    env = dict(warm.env, PYTHONPATH=str(ROOT), WARM_BUNDLE=str(served), WARM_CC=str(cc))
    env.update(WARM_BUNDLE_WRITE="1", WARM_REPORT="1")
    proc = subprocess.Popen(
        [sys.executable, "worker.py"], cwd=tmp_path, env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    pids = Path(f"{cc}.pids")
    while not pids.exists() and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "\n  kernel z44 (compile interrupted: nothing stored) on host (key " in err, err
    assert "written back into it" not in err, err
    assert "compiled and tuned them itself (none of them stored: each says why):\n" in err, err
