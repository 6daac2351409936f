"""A real local Dask cluster for the tests: its workers each a process of one thread, on
127.0.0.1, no dashboard port taken; started and stopped by the test module that uses it.
Dask's nanny writes what it gives its workers into this process's own environment
(`PYTHONHASHSEED`, `OMP_NUM_THREADS`, `MALLOC_TRIM_THRESHOLD_`, `__DASK_PARENT_PID`...):
it is put back as it was once the cluster stops, or every later test of this pytest worker
started its processes with one hash seed (and a forked server of their own)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def local_cluster(workers: int = 2, env: dict[str, str] | None = None) -> Iterator[str]:
    """A cluster of `workers` (each with `env` in its environment), as its scheduler's
    address; skips where `distributed` is not installed."""
    distributed = pytest.importorskip("distributed")
    before = dict(os.environ)
    with (
        _environment_kept(before),
        distributed.LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",
            host="127.0.0.1",
            **({"env": env} if env else {}),
        ) as cluster,
    ):
        yield cluster.scheduler_address


@contextlib.contextmanager
def _environment_kept(before: dict[str, str]) -> Iterator[None]:
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(before)
