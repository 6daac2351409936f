"""A real local Dask cluster for the tests: its workers each a process of one thread, on
127.0.0.1, no dashboard port taken; started and stopped by the test module that uses it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest


@contextlib.contextmanager
def local_cluster(workers: int = 2, env: dict[str, str] | None = None) -> Iterator[str]:
    """A cluster of `workers` (each with `env` in its environment), as its scheduler's
    address; skips where `distributed` is not installed."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        host="127.0.0.1",
        **({"env": env} if env else {}),
    ) as cluster:
        yield cluster.scheduler_address
