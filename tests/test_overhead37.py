"""overhead37: what `warm run` pays beyond its work, through the real CLI (subprocesses, the
system cc, SQLite files). A run's record joins the write transaction that stores the
CompileAndAutotune pass's last entries (one commit, one set of fsyncs, not two), and only
when the pass's workload ran to its end: a run that failed records no run.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

MATMUL = EXAMPLES / "matmul_host.py"

IDLE = """
def workload(rt):
    pass
"""

FAILS_IN_TUNING_PASS = """
import numpy as np
from warmcli import Kernel

ONE = Kernel("void one(float *x) { x[0] = 1.0f; }", "one", "P")
CALLS = []


def workload(rt):
    CALLS.append(1)
    x = rt.upload(np.zeros(1, dtype=np.float32))
    rt.launch(ONE, x)
    rt.synchronize()
    if len(CALLS) == 2:  # the CompileAndAutotune pass, once its kernel was built
        raise RuntimeError("boom")
"""


def change_counter(bundle: Path) -> int:
    """SQLite's file change counter (header bytes 24..27): one more per committed write."""
    return int.from_bytes(bundle.read_bytes()[24:28], "big")


def run_record(bundle: Path) -> str | None:
    with sqlite3.connect(bundle) as conn:
        row = conn.execute("SELECT value FROM manifest WHERE key = 'run'").fetchone()
    return None if row is None else str(row[0])


def test_a_run_that_stores_commits_its_entries_and_its_record_at_once(
    warm: Warm, tmp_path: Path
) -> None:
    """A new bundle the run stored 6 kernels and 3 tunes in was written by as many commits as
    one the run stored nothing in (its record only): the record joins the store's commit
    (it was a second transaction of its own: four more fsyncs per run)."""
    idle, stored = tmp_path / "idle.py", tmp_path / "stored.warm"
    idle.write_text(IDLE)
    empty = tmp_path / "empty.warm"
    for workload, bundle in ((idle, empty), (MATMUL, stored)):
        proc = warm("run", workload, "-b", bundle, "-q")
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
        assert run_record(bundle) is not None
    assert change_counter(stored) == change_counter(empty)


def test_a_run_whose_tuning_pass_fails_keeps_its_entries_and_records_no_run(
    warm: Warm, tmp_path: Path
) -> None:
    """What the failed pass built stays stored; no record says the run was written."""
    workload, bundle = tmp_path / "fails.py", tmp_path / "b.warm"
    workload.write_text(FAILS_IN_TUNING_PASS)
    proc = warm("run", workload, "-b", bundle, "-q")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "boom" in proc.stderr, proc.stderr
    with sqlite3.connect(bundle) as conn:
        assert conn.execute("SELECT count(*) FROM kernels").fetchone() == (1,)
    assert run_record(bundle) is None
