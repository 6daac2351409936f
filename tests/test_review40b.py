"""Review of the Dask/fleet merges (fleet40, dask40b): a `warm run --dask` re-run must
leave its bundle as a local re-run leaves it (review40b).

Real parts only: the CLI in subprocesses, one real local Dask cluster (two worker processes
on 127.0.0.1), the system cc, real SQLite files. The one stand-in: tunes made pending by
rewriting their rows with warm's own row writer, as a GPU-less pre-build (`--arch`) stores
them, which this machine (no GPU) cannot make of a host workload otherwise.
"""

from __future__ import annotations

import shutil
import sqlite3
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm

from warmcli.bundle.rows import AS_STORED
from warmcli.bundle.store import Bundle
from warmcli.bundle.tune_row import interner, tune_values

distributed = pytest.importorskip("distributed")

MATMUL = EXAMPLES / "matmul_host.py"


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        host="127.0.0.1",
    )
    yield cluster.scheduler_address
    cluster.close()


def _tunes(warm: Warm, bundle: Path) -> list[tuple[str, str | None]]:
    return sorted((t["status"], t["pick"]) for t in warm.json("stats", bundle)["tunes"])


def _make_pending(path: Path) -> None:
    """Every tune of the bundle at `path` rewritten as a GPU-less pre-build stores it:
    pending, no pick, its candidates pending, never measured."""
    with Bundle.open(path) as bundle:
        tunes = list(bundle.each_tune(order=AS_STORED))
    conn = sqlite3.connect(path)
    with conn:
        intern = interner(conn, str(path))
        for tune in tunes:
            waiting = tuple(
                replace(c, status="pending", seconds=None, samples=()) for c in tune.candidates
            )
            pending = replace(
                tune, status="pending", pick=None, candidates=waiting, seconds=0.0, measured_at=0.0
            )
            conn.execute(
                "INSERT OR REPLACE INTO tunes VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                tune_values(pending, intern, 0.0),
            )
    conn.close()


def test_a_dask_rerun_measures_the_tunes_a_gpu_less_prebuild_left_pending(
    warm: Warm, scheduler: str, tmp_path: Path
) -> None:
    """A bundle pre-built without a GPU holds its tunes pending; the README says `warm run`
    on a machine that can measure them measures them. Locally it does. With `--dask` the
    shards measured them (each was sent its part, the pending tune in it), but the merge
    kept the bundle's own tune over every shard's (`as_run`: a held tune is a hit), so the
    bundle stayed pending and the run's own verify pass failed (exit 1: '3 tune(s) measured,
    not in the bundle'). A measured tune now replaces a pending one held, as locally."""
    bundle, local = tmp_path / "b.warm", tmp_path / "l.warm"
    assert warm("run", MATMUL, "-b", bundle, "-q").returncode == 0
    _make_pending(bundle)
    assert {s for s, _ in _tunes(warm, bundle)} == {"pending"}
    shutil.copy(bundle, local)
    here = warm("run", MATMUL, "-b", local, "-q")
    assert here.returncode == 0, here.stderr
    fanned = warm("run", MATMUL, "-b", bundle, "-q", "--dask", scheduler)
    assert fanned.returncode == 0, fanned.stdout + fanned.stderr
    assert "stored 0 new kernel(s) and 3 new tune(s)" in fanned.stdout
    statuses = [{s for s, _ in _tunes(warm, b)} for b in (bundle, local)]
    assert statuses == [{"measured"}, {"measured"}]
    again = warm("run", MATMUL, "-b", bundle, "-q", "--dask", scheduler)  # a hit now: kept
    assert again.returncode == 0 and "stored 0 new kernel(s) and 0 new tune(s)" in again.stdout
