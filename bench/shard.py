"""Sharded warming on a local Dask cluster (row `shard_speedup`).

A tuning-heavy generated workload (`examples/many_kernels_host.py` with every
candidate spinning) is warmed once by one `warm run`, then by `warm run --dask`
over a `LocalCluster` of four worker processes (one shard each). The ratio is
the one run's wall time over the fanned-out one's; it is bounded by the usable
CPUs (on 2 cores, at most about 2×, less the cluster's and the merge's costs), so
the target is half the shards this machine can run at once, and at least 1×.
Skipped at the tiny size (the smoke test): starting a cluster is the slow part.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from bench.rows import ROOT, TINY, Row, Size, at_least, python, skipped

WORKERS = 4
WORKLOAD = ROOT / "examples" / "many_kernels_host.py"
ENV = {"WARM_EXAMPLE_KERNELS": "60", "WARM_EXAMPLE_SPIN": "4000000"}


def shard_speedup(size: Size) -> Row:
    target = max(1.0, 0.5 * min(WORKERS, len(os.sched_getaffinity(0))))
    if size == TINY:
        return skipped("shard_speedup", f"≥ {target:g}×", "skipped: make bench starts a cluster")
    try:
        import distributed  # noqa: F401
    except ImportError:
        return skipped("shard_speedup", f"≥ {target:g}×", "skipped: no distributed (warmcli[dask])")
    with tempfile.TemporaryDirectory(prefix="warm-bench-shard-") as folder:
        extra = {**ENV, "WARM_HOME": str(Path(folder) / "home")}
        env = {**os.environ, **extra}
        saved = {k: os.environ.get(k) for k in extra}
        os.environ.update(extra)  # the cluster's workers run the shards with these too
        try:
            one, fanned = _time_both(folder, env)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    cpus = len(os.sched_getaffinity(0))
    detail = (
        f"one run {one:.1f} s, {WORKERS} shards on {WORKERS} workers {fanned:.1f} s "
        f"({cpus} usable CPUs bound the speed-up)"
    )
    return at_least("shard_speedup", one / fanned, target, detail)


def _time_both(folder: str, env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds of one run, and of the run fanned out over a fresh local cluster."""
    from distributed import LocalCluster

    args = ["-m", "warmcli", "run", str(WORKLOAD), "--no-verify", "-q"]
    _, one = python(*args, "-b", str(Path(folder) / "one.warm"), env=env)
    with LocalCluster(
        n_workers=WORKERS, threads_per_worker=1, dashboard_address=":0", host="127.0.0.1"
    ) as cluster:
        address = cluster.scheduler_address
        _, fanned = python(*args, "-b", str(Path(folder) / "fan.warm"), "--dask", address, env=env)
    return one, fanned
