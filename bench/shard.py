"""Sharded warming on a local Dask cluster (row `shard_speedup`).

A tuning-heavy generated workload (`examples/many_kernels_host.py` with every
candidate spinning) is warmed once by one `warm run`, then by `warm run --dask`
over a `LocalCluster` of four worker processes (one shard each): the same
workload, the same environment, and the same total work (both bundles must hold
the same kernels and tunes, checked). The ratio is the one run's wall time over
the fanned-out one's. Starting the cluster is not counted; it is reported apart.
The speed-up is bounded by the usable CPUs: four shards on C cores run at most
min(4, C) at once, so on 2 cores at most about 2×, less the shards' process starts
and the merge; other processes' load (the detail gives the load average) lowers it
further. The target is half of that bound, and at least 1×. Skipped at the
tiny size (the smoke test): starting a cluster is the slow part.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from bench.rows import ROOT, TINY, Row, Size, at_least, python, skipped

WORKERS = 4
WORKLOAD = ROOT / "examples" / "many_kernels_host.py"
ENV = {"WARM_EXAMPLE_KERNELS": "60", "WARM_EXAMPLE_SPIN": "40000000"}


def shard_speedup(size: Size) -> Row:
    cpus = len(os.sched_getaffinity(0))
    bound = min(WORKERS, cpus)
    target = max(1.0, 0.5 * bound)
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
            one, fanned, start = _time_both(Path(folder), env)
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    detail = (
        f"one run {one:.1f} s, {WORKERS} shards on {WORKERS} workers {fanned:.1f} s "
        f"(cluster start {start:.1f} s, not counted); bound: {cpus} usable CPU(s) run at most "
        f"{bound} of the {WORKERS} shards at once, so at most ~{bound}×; load average "
        f"{os.getloadavg()[0]:.1f} after (others' processes share those CPUs)"
    )
    return at_least("shard_speedup", one / fanned, target, detail)


def _time_both(folder: Path, env: dict[str, str]) -> tuple[float, float, float]:
    """Wall seconds of one run, of the run fanned out over a local cluster already
    started, and of starting that cluster."""
    import dask
    from distributed import LocalCluster

    args = ["-m", "warmcli", "run", str(WORKLOAD), "--no-verify", "-q"]
    _, one = python(*args, "-b", str(folder / "one.warm"), env=env)
    started = time.perf_counter()
    # Dask's scratch in `folder` (removed after): its `dask-scratch-space` in TMPDIR stays.
    scratch = dask.config.set({"temporary-directory": str(folder)})
    with (
        scratch,
        LocalCluster(
            n_workers=WORKERS, threads_per_worker=1, dashboard_address=":0", host="127.0.0.1"
        ) as cluster,
    ):
        start = time.perf_counter() - started
        address = cluster.scheduler_address
        _, fanned = python(*args, "-b", str(folder / "fan.warm"), "--dask", address, env=env)
    if _contents(folder / "one.warm") != _contents(folder / "fan.warm"):
        raise RuntimeError("the fanned-out bundle differs from the one run's: not the same work")
    return one, fanned, start


def _contents(bundle: Path) -> tuple[set[str], set[str]]:
    """The kernels' and tunes' keys a bundle holds."""
    from warmcli.bundle.store import Bundle

    with Bundle.open(bundle) as b:
        return {k.key for k in b.kernels()}, {t.key for t in b.tunes()}
