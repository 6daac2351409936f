"""`warm run --dask` when the cluster has no worker: every worker lost while a shard runs
is one line and exit 2 once `WARM_DASK_NO_WORKER_WAIT` has passed with none (it waited
forever), never a hang or a traceback; a run started before any worker has joined (a
scheduler and its workers started together, the run right after) waits for one as long
and then runs (it failed at once: 'no workers'), or says none joined. A real scheduler
and real worker processes, one killed with its shard."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm
from dask_cluster import scratch_in

distributed = pytest.importorskip("distributed")

# A host workload whose import, in a shard on the worker (the variable is the worker's
# only), says it has started and then waits: the worker is killed meanwhile.
STALLS = """
import os, time
mark = os.environ.get("WARM_TEST_SHARD_STARTED")
if mark:
    open(mark, "w").close()
    time.sleep(120)
"""
WORKER = (sys.executable, "-m", "distributed.cli.dask_worker")
RUN = (sys.executable, "-m", "warmcli", "run")


@pytest.fixture
def lonely_scheduler(tmp_path: Path) -> Iterator[str]:
    with scratch_in(tmp_path):
        cluster = distributed.LocalCluster(
            n_workers=0, processes=True, dashboard_address=":0", host="127.0.0.1"
        )
    yield cluster.scheduler_address
    cluster.close()


def _worker(scheduler: str, mark: Path) -> subprocess.Popen[bytes]:
    """One worker process (no nanny to bring it back), in its own process group, its scratch
    and TMPDIR (a shard's folder, left where it is killed with its shard) `mark`'s folder."""
    env = {**os.environ, "WARM_TEST_SHARD_STARTED": str(mark), "TMPDIR": str(mark.parent)}
    own = ("--local-directory", str(mark.parent))
    return subprocess.Popen(
        [*WORKER, scheduler, "--no-nanny", "--nthreads", "1", "--no-dashboard", *own],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _wait_for(path: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def test_every_worker_lost_is_one_line_and_exit_2_not_a_hang(
    warm: Warm, lonely_scheduler: str, tmp_path: Path
) -> None:
    workload, mark, bundle = tmp_path / "stalls.py", tmp_path / "started", tmp_path / "b.warm"
    workload.write_text(STALLS)
    worker, run = _worker(lonely_scheduler, mark), None
    try:
        client = distributed.Client(lonely_scheduler, timeout="10s")
        client.wait_for_workers(1, timeout=60)
        client.close()
        run = subprocess.Popen(
            [*RUN, str(workload), "-b", str(bundle), "--dask", lonely_scheduler],
            env={**warm.env, "WARM_DASK_NO_WORKER_WAIT": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        _wait_for(mark, 60)
        os.killpg(worker.pid, signal.SIGKILL)  # the worker and its shard's process
        started = time.monotonic()
        out, err = run.communicate(timeout=60)
        assert time.monotonic() - started < 40
    finally:
        if run is not None and run.poll() is None:
            run.kill()
            run.communicate()
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
    assert run.returncode == 2, out + err
    assert err.startswith(f"warm: error: dask scheduler {lonely_scheduler}: no worker"), err
    assert "1 shard" in err and len(err.strip().splitlines()) == 1, err


def test_a_wait_timing_out_as_on_python_3_10_is_no_lost_scheduler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`distributed.wait(timeout=)` raises `distributed.TimeoutError`, which is asyncio's:
    on Python 3.10 no builtin `TimeoutError`, so a shard running past the first 1 s poll was
    'dask scheduler ... lost' there. Simulated here with a class of its own, as on 3.10."""
    from warmcli.warming import fanout

    class AsyncioTimeout(Exception):  # Python 3.10's asyncio.TimeoutError: no TimeoutError
        pass

    shard = object()
    calls: list[int] = []

    def wait(pending: set[object], timeout: float, return_when: str) -> tuple[set, set]:
        calls.append(1)
        if len(calls) == 1:
            raise AsyncioTimeout(f"timed out after {timeout} s.")
        return set(pending), set()

    class Client:
        def nthreads(self) -> dict[str, int]:
            return {"tcp://worker": 1}

    monkeypatch.setattr(distributed, "TimeoutError", AsyncioTimeout)
    monkeypatch.setattr(distributed, "wait", wait)
    assert list(fanout._finished(Client(), "tcp://s", [shard], 60.0)) == [shard]


def test_a_bad_no_worker_wait_is_refused_before_any_shard_is_sent(
    warm: Warm, tmp_path: Path
) -> None:
    """`WARM_DASK_NO_WORKER_WAIT` was read once the shards were submitted: a bad value
    stopped warm with shards left running on the cluster (or, with no cluster to reach,
    was not named at all). It is read before warm connects."""
    workload = tmp_path / "w.py"
    workload.write_text("def workload(rt):\n    pass\n")
    proc = subprocess.run(
        [*RUN, str(workload), "-b", str(tmp_path / "b.warm"), "--dask", "tcp://127.0.0.1:9"],
        env={**warm.env, "WARM_DASK_NO_WORKER_WAIT": "soon"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "WARM_DASK_NO_WORKER_WAIT" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def _clients(scheduler: str) -> int:
    """How many clients the scheduler holds, this one's included (and Dask's own)."""
    with distributed.Client(scheduler, timeout="10s") as client:
        return int(client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.clients)))


def test_a_run_started_before_any_worker_joined_waits_for_one(
    warm: Warm, lonely_scheduler: str, tmp_path: Path
) -> None:
    """CI starts `dask scheduler`, `dask worker` and `warm run --dask` together: the run
    looked at the cluster before the worker had joined and failed at once ('no workers');
    a worker joining within `WARM_DASK_NO_WORKER_WAIT` now gets its shard."""
    bundle, alone = tmp_path / "b.warm", _clients(lonely_scheduler)  # (Dask has its own)
    run = subprocess.Popen(
        [*RUN, str(EXAMPLES / "matmul_host.py"), "-b", str(bundle), "--dask", lonely_scheduler],
        env={**warm.env, "WARM_DASK_NO_WORKER_WAIT": "120"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    worker = None
    try:
        deadline = time.monotonic() + 60  # until the run is connected, and waiting
        while _clients(lonely_scheduler) <= alone:
            assert run.poll() is None, run.communicate()
            assert time.monotonic() < deadline, "warm run never connected"
            time.sleep(0.2)
        assert run.poll() is None, run.communicate()  # (it said "no workers" here)
        worker = _worker(lonely_scheduler, tmp_path / "unused")
        out, err = run.communicate(timeout=240)
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
        if worker is not None:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    assert run.returncode == 0, out + err
    assert "shard 0/1 on tcp://" in out and "the bundle is complete" in out, out


def test_a_cluster_no_worker_joins_is_one_line_once_the_wait_has_passed(
    warm: Warm, lonely_scheduler: str, tmp_path: Path
) -> None:
    workload = tmp_path / "w.py"
    workload.write_text("def workload(rt):\n    pass\n")
    proc = warm.with_env(WARM_DASK_NO_WORKER_WAIT="1")(
        "run", workload, "-b", tmp_path / "b.warm", "--dask", lonely_scheduler
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == (
        f"warm: error: dask scheduler {lonely_scheduler}: no workers (none joined in 1 s: "
        "WARM_DASK_NO_WORKER_WAIT)\n"
    ), proc.stderr
    assert not (tmp_path / "b.warm").exists()


class FakeCluster:
    """A fake for `fanout._joined`'s pure logic only: each look at the cluster
    (`scheduler_info`) answers the next of `looks`, the last one ever after."""

    def __init__(self, *looks: dict[str, dict]) -> None:
        self.looks, self.looked = list(looks), 0

    def scheduler_info(self, n_workers: int = 5) -> dict[str, dict]:
        self.looked += 1
        return {"workers": self.looks[min(self.looked, len(self.looks)) - 1]}


def test_workers_joining_one_after_another_each_get_a_shard(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wait for a first worker took the first that joined: of workers started together
    (a scheduler's fleet coming up), those joining a second later got no shard (review51b).
    Once one has joined, the cluster is looked at until a look finds no more."""
    from warmcli.warming import fanout

    monkeypatch.setattr(fanout, "POLL", 0.0)
    a, b, gpu = {"tcp://a": {}}, {"tcp://b": {}}, {"tcp://g": {"resources": {"GPU": 1}}}
    up = FakeCluster(a)  # one up at the first look: taken at once, no wait
    assert fanout._joined(up, "s", False, 60.0) == ["tcp://a"] and up.looked == 1
    coming = FakeCluster({}, {}, a, {**a, **b}, {**a, **b})
    assert fanout._joined(coming, "s", False, 60.0) == ["tcp://a", "tcp://b"]
    assert coming.looked == 5  # until a look found no more than the last
    gpus = FakeCluster({}, a, {**a, **gpu})  # a GPU run: the GPU worker, joined second
    assert fanout._joined(gpus, "s", True, 60.0) == ["tcp://g"]
