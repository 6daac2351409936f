"""Review of shards36's run record, through the real CLI (subprocesses, the system cc,
SQLite files): a run into a bundle whose manifest warm cannot read stores, verifies and
signs as before the record (it ended in exit 2, unsigned, after storing); a whole run into
a bundle holding another run's shard records no run it cannot vouch for (a merge then said
a shard it held was missing, exit 1).
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm

MATMUL = EXAMPLES / "matmul_host.py"
MANY = EXAMPLES / "many_kernels_host.py"


@pytest.fixture
def warm(tmp_path: Path) -> Warm:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    return Warm(dict(env, WARM_HOME=str(tmp_path / "home"), COLUMNS="200"))


def ok(proc: object) -> None:
    code, stdout, stderr = (getattr(proc, n) for n in ("returncode", "stdout", "stderr"))
    assert code == 0 and "Traceback" not in stderr, stdout + stderr


@pytest.mark.parametrize("key", ["run", "zzz"])
def test_run_into_a_bundle_with_an_unreadable_manifest_row_stores_and_signs(
    warm: Warm, tmp_path: Path, key: str
) -> None:
    """A manifest row warm cannot read (too long, from elsewhere: its own `run` or any other)
    made `warm run` store, then fail in one line with exit 2 (no verify, no signature)."""
    bundle, private = tmp_path / "b.warm", tmp_path / "k"
    ok(warm("keygen", private))
    ok(warm("run", MATMUL, "--shard", "0/2", "-b", bundle, "-q", "--key", private))
    with sqlite3.connect(bundle) as conn:
        conn.execute("INSERT OR REPLACE INTO manifest VALUES (?, ?)", (key, "x" * 100_000))
    proc = warm("run", MATMUL, "--shard", "1/2", "-b", bundle, "--key", private)
    ok(proc)
    assert "verify:" in proc.stdout and "signed by key" in proc.stdout, proc.stdout
    trusted = Warm(dict(warm.env, WARM_TRUSTED_KEYS=f"{private}.pub"))
    proc = trusted("verify", bundle)
    assert "not signed by a trusted key" not in proc.stdout, proc.stdout


def test_whole_run_into_a_bundle_holding_a_shard_records_no_run(warm: Warm, tmp_path: Path) -> None:
    """x holds shard 0/2 of matmul, then a whole run of another workload: merged with shard
    1/2, matmul is whole, yet the merge said 'shard 0/2 missing' (x recorded the other run
    as all it held) and exited 1."""
    x, y, out = tmp_path / "x.warm", tmp_path / "y.warm", tmp_path / "xy.warm"
    ok(warm("run", MATMUL, "--shard", "0/2", "-b", x, "-q"))
    ok(warm("run", MANY, "-b", x, "-q"))
    ok(warm("run", MATMUL, "--shard", "1/2", "-b", y, "-q"))
    proc = warm("merge", x, y, "-o", out)
    ok(proc)
    assert "missing" not in proc.stderr, proc.stderr


def test_whole_run_again_into_its_own_bundle_stays_whole(warm: Warm, tmp_path: Path) -> None:
    """The same run again (or after its shards) still records the run, whole."""
    x, y, out = tmp_path / "x.warm", tmp_path / "y.warm", tmp_path / "xy.warm"
    ok(warm("run", MATMUL, "--shard", "0/2", "-b", x, "-q"))
    ok(warm("run", MATMUL, "-b", x, "-q"))
    ok(warm("run", MATMUL, "--shard", "1/3", "-b", y, "-q"))
    proc = warm("merge", x, y, "-o", out)
    ok(proc)  # x holds the run whole: nothing missing
    with sqlite3.connect(out) as conn:
        (value,) = conn.execute("SELECT value FROM manifest WHERE key = 'run'").fetchone()
    assert '"count": 1' in value, value
