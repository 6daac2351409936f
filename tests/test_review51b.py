"""Review 51b (a hostile review of stop 51's product changes): what it found.

- `warm run --dask` waiting for a first worker (`fanout._joined`, new this stop): a
  scheduler that dies during the wait was said as "dask scheduler ADDR lost: 'workers'"
  (the text of a `KeyError`: Dask's `Client.scheduler_info()` answers `{}` once its
  connection is lost). Now the line says the scheduler stopped answering.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import Warm


def test_a_scheduler_lost_while_no_worker_has_joined_is_said_so(warm: Warm, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    workload = tmp_path / "w.py"
    workload.write_text("def workload(rt):\n    pass\n")
    cluster = distributed.LocalCluster(  # the scheduler in this process: no worker ever joins
        n_workers=0, processes=False, protocol="tcp://", dashboard_address=":0", host="127.0.0.1"
    )
    scheduler = cluster.scheduler
    alone = len(scheduler.clients)
    run = warm.with_env(WARM_DASK_NO_WORKER_WAIT="120").popen(
        "run", workload, "-b", tmp_path / "b.warm", "--dask", cluster.scheduler_address
    )
    try:
        deadline = time.monotonic() + 60  # until the run is connected, and waiting
        while len(scheduler.clients) <= alone:
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, "warm run never connected"
            time.sleep(0.1)
        cluster.close()  # the scheduler gone while warm waits for a worker
        out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
        cluster.close()
    assert run.returncode == 2, out + err
    assert err.startswith(f"warm: error: dask scheduler {cluster.scheduler_address} lost: "), err
    assert "'workers'" not in err and "stopped answering" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "b.warm").exists()
