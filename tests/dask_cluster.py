"""A real local Dask cluster for the tests: its workers each a process of one thread, on
127.0.0.1, no dashboard port taken. One cluster of two workers is shared by every test of a
test process that can share it (`shared_cluster`, `dask_scheduler`: fixtures conftest
registers), started on first use (~1.7 s of CPU a start, once paid by each module) and
closed at session end or once no test has used it for `IDLE` seconds; a test that kills
workers or needs a scheduler of its own starts one with `local_cluster`. A cluster's scratch
(Dask's, and its workers' TMPDIR) is a folder of its own, removed once it has closed
(`scratch_space`; one a test makes itself: `scratch_in`).

Dask's own monitors run at seconds (`QUIET`), not at its 10-500 ms defaults: those cost an
idle cluster ~7% of a core (measured: 1.5 CPU-s in 20 s idle, 0.2 with `QUIET`); nothing
warm does or a test checks depends on them (profiling, event-loop ticks, memory and
system monitors, work stealing between two workers each given its own shard).

Dask's nanny writes what it gives its workers into this process's own environment
(`PYTHONHASHSEED`, `OMP_NUM_THREADS`, `MALLOC_TRIM_THRESHOLD_`, `__DASK_PARENT_PID`...):
it is put back as it was once a cluster has started and once it stops, or every later test
of this pytest worker started its processes with one hash seed (and a forked server of
their own). A module whose workers need a variable set in their environment (as a GPU
node's image sets it) has it set in the shared workers' own environment for as long as it
uses them (`SharedCluster.using(env)`: each worker's `os.environ`, which a shard's `warm
run` is given, `warmcli.config.worker_environment`), then put back."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import pytest

WORKERS = 2  # the shared cluster's
IDLE = 30.0  # seconds unused after which the shared cluster is closed (restarted if used)
QUIET = {
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.profile.enabled": False,
    "distributed.worker.memory.monitor-interval": "2s",
    "distributed.scheduler.work-stealing": False,
}


@contextlib.contextmanager
def local_cluster(workers: int = 2, env: dict[str, str] | None = None) -> Iterator[str]:
    """A cluster of `workers` (each with `env` in its environment), as its scheduler's
    address; skips where `distributed` is not installed."""
    with _environment_kept(dict(os.environ)), _started(workers, env) as cluster:
        yield cluster.scheduler_address


@contextlib.contextmanager
def _started(workers: int, env: dict[str, str] | None = None) -> Iterator[Any]:
    """A started cluster, this process's environment put back once it has started (its
    close writes none: the shared one's, on a timer's thread, leaves it alone)."""
    distributed = pytest.importorskip("distributed")
    import dask

    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(scratch_space())  # (removed once the cluster has closed)
        own = {**QUIET, "temporary-directory": folder}
        with _environment_kept(dict(os.environ)), dask.config.set(own):
            cluster = stack.enter_context(
                distributed.LocalCluster(
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=":0",
                    host="127.0.0.1",
                    env={"TMPDIR": folder, **(env or {})},
                )
            )
        yield cluster


def scratch_in(folder: str | os.PathLike[str]) -> Any:
    """Dask's configuration while a cluster (in this process) is made: its scratch space in
    `folder` (a test's `tmp_path`), not a `dask-scratch-space` Dask leaves in TMPDIR."""
    import dask

    return dask.config.set({"temporary-directory": os.fspath(folder)})


@contextlib.contextmanager
def scratch_space() -> Iterator[str]:
    """A folder of this test process's for a cluster's scratch: Dask's (its `temporary-directory`:
    the scheduler's, each nanny's and worker's `dask-scratch-space`, which Dask makes in
    TMPDIR and never removes) and its workers' TMPDIR (a shard's folder, left where a worker is
    killed with its shard), removed at the end of the block, once the cluster has closed."""
    folder = tempfile.mkdtemp(prefix="warm-dask-")
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class SharedCluster:
    """This test process's two-worker cluster: started by the first `using`, closed by a
    timer `IDLE` seconds after its last user left, or by `close` (session end)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stack: contextlib.ExitStack | None = None
        self._address = ""
        self._users = 0
        self._timer: threading.Timer | None = None

    @contextlib.contextmanager
    def using(self, env: dict[str, str] | None = None) -> Iterator[str]:
        """The scheduler's address while the caller uses it, its workers' environment with
        `env` set meanwhile."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            if self._stack is None:
                stack = contextlib.ExitStack()
                self._address = stack.enter_context(_started(WORKERS)).scheduler_address
                self._stack = stack
            self._users += 1
        try:
            with _workers_environment(self._address, env or {}):
                yield self._address
        finally:
            with self._lock:
                self._users -= 1
                if self._users == 0:
                    self._timer = threading.Timer(IDLE, self._close_idle)
                    self._timer.daemon = True
                    self._timer.start()

    def _close_idle(self) -> None:
        with self._lock:
            if self._users == 0:
                self._close()

    def close(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._close()

    def _close(self) -> None:
        stack, self._stack, self._timer = self._stack, None, None
        if stack is not None:
            stack.close()


@contextlib.contextmanager
def _workers_environment(address: str, env: dict[str, str]) -> Iterator[None]:
    """`env` set in each worker's `os.environ` meanwhile, its earlier values put back."""
    if not env:
        yield
        return
    import distributed

    def set_env(values: dict[str, str | None]) -> dict[str, str | None]:
        import os

        before = {name: os.environ.get(name) for name in values}
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        return before

    with distributed.Client(address, timeout="60s") as client:
        before = client.run(set_env, env)
    try:
        yield
    finally:
        with distributed.Client(address, timeout="60s") as client:
            for worker, values in before.items():
                client.run(set_env, values, workers=[worker])


@pytest.fixture(scope="session")
def shared_cluster() -> Iterator[SharedCluster]:
    """This test process's shared cluster (see the module's doc); closed at session end."""
    pytest.importorskip("distributed")
    shared = SharedCluster()
    yield shared
    shared.close()


@pytest.fixture
def dask_scheduler(shared_cluster: SharedCluster) -> Iterator[str]:
    """The shared cluster's scheduler address, for one test."""
    with shared_cluster.using() as address:
        yield address


@contextlib.contextmanager
def _environment_kept(before: dict[str, str]) -> Iterator[None]:
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)
