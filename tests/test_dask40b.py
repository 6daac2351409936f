"""A `warm run --dask` re-run does only what is new, as a local re-run does (dask40b).

Real parts only: the CLI in subprocesses, one real local Dask cluster (two worker processes
on 127.0.0.1), the system cc, real SQLite files.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm

distributed = pytest.importorskip("distributed")

MANY = EXAMPLES / "many_kernels_host.py"


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    """Two workers whose environment says the example has 20 kernels."""
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        host="127.0.0.1",
        env={"WARM_EXAMPLE_KERNELS": "20"},
    )
    yield cluster.scheduler_address
    cluster.close()


SLOW_SHARD = """
import sys, time
sys.path.insert(0, {examples!r})
import matmul_host

DEVICE = "host"


def workload(rt):
    matmul_host.workload(rt)
    if rt.shard is not None and rt.shard.index == 1:  # one shard takes long
        time.sleep(6)
"""


def test_ctrl_c_while_shards_run_says_what_this_run_added(
    warm: Warm, scheduler: str, tmp_path: Path
) -> None:
    """Ctrl-C while a shard still ran, into a bundle that already held entries, said the
    bundle's total (`kept.kernels`) as stored by this run; now what this run added."""
    workload, bundle = tmp_path / "slow.py", tmp_path / "b.warm"
    held = warm("run", MANY, "-b", bundle, "-q")  # the bundle holds 200 kernels already
    assert held.returncode == 0, held.stderr
    workload.write_text(SLOW_SHARD.format(examples=str(EXAMPLES)))
    proc = warm.popen("run", workload, "-b", bundle, "--dask", scheduler)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # one shard finished, the other still runs
            if line.startswith("shard "):
                break
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("warm: interrupted: "), err
    kernels = int(last.split()[2])
    assert 0 < kernels < 6, err  # matmul_host's: some of its 6, never what was held
