"""Review 51b (a hostile review of stop 51's product changes): what it found.

- `warm run --dask` waiting for a first worker (`fanout._joined`, new this stop): a
  scheduler that dies during the wait was said as "dask scheduler ADDR lost: 'workers'"
  (the text of a `KeyError`: Dask's `Client.scheduler_info()` answers `{}` once its
  connection is lost). Now the line says the scheduler stopped answering.
- NVRTC's hint for C++ overloads given C linkage (`nvrtc_log`, new this stop) told a user of
  warm's own `Kernel` whose source holds its own `extern "C" { }` block to "pass
  no_extern_c=True", a PyCUDA `SourceModule` argument that `Kernel` has not. Now the same
  line also names the remedy for a block in the source itself: move them out of it.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import Warm
from dask_cluster import scratch_in
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


def test_a_scheduler_lost_while_no_worker_has_joined_is_said_so(warm: Warm, tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    workload = tmp_path / "w.py"
    workload.write_text("def workload(rt):\n    pass\n")
    with scratch_in(tmp_path):  # the scheduler in this process: no worker ever joins
        cluster = distributed.LocalCluster(
            n_workers=0,
            processes=False,
            protocol="tcp://",
            dashboard_address=":0",
            host="127.0.0.1",
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


# warm's own Kernel (no PyCUDA, no wrap): the source's own extern "C" block holds overloads.
OWN_BLOCK = '''
from warmcli import Kernel
DEVICE = "cuda"
SRC = """
extern "C" {
__device__ float act(float x) { return x; }
__device__ double act(double x) { return x; }
__global__ void k(float *y, int n) { if (threadIdx.x < n) y[threadIdx.x] = act(y[0]); }
}
"""
K = Kernel(SRC, "k", "Pi", language="cuda")
def workload(rt):
    rt.launch(K, rt.buffer(256), 256, grid=1, block=256)
'''


def test_overloads_in_a_sources_own_extern_c_block_are_told_to_move_out(
    warm: Warm, tmp_path: Path
) -> None:
    (tmp_path / "own.py").write_text(OWN_BLOCK)
    args = ("run", tmp_path / "own.py", "--arch", "sm_90", "--compiler", "nvrtc", "-q")
    proc = warm(*args, "-b", tmp_path / "b.warm")
    assert proc.returncode == 2, proc.stderr
    assert 'more than one instance of overloaded function "act" has "C" linkage' in proc.stderr
    hint = proc.stderr.splitlines()[-1]
    assert "a block in the source itself: move them, or their #include, out of it" in hint, hint
