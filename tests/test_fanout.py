"""`warm run --dask SCHEDULER` against a real local Dask cluster (worker processes): the
shards fanned out, merged and verified equal one run, on the host and for `--arch`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm

from warmcli.bundle.store import Bundle
from warmcli.warming.fanout import shard_workers

distributed = pytest.importorskip("distributed")
WORKERS = 3


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    cluster = distributed.LocalCluster(
        n_workers=WORKERS,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        host="127.0.0.1",
    )
    yield cluster.scheduler_address
    cluster.close()


def _keys(bundle: Path) -> tuple[set[str], set[str]]:
    with Bundle.open(bundle) as b:
        return {k.key for k in b.kernels()}, {t.key for t in b.tunes()}


def _fanned_out(warm: Warm, scheduler: str, bundle: Path, *args: str | Path) -> dict:
    """`warm run --dask`: one shard per worker, merged into `bundle`, verified here."""
    doc = warm.json("run", *args, "-b", bundle, "--dask", scheduler)
    assert doc["verified"] is True and not doc["missing"]
    assert sorted(s["shard"] for s in doc["shards"]) == [f"{i}/{WORKERS}" for i in range(WORKERS)]
    assert len({s["worker"] for s in doc["shards"]}) == WORKERS  # one shard per worker
    return doc


def test_dask_fan_out_on_the_host_equals_one_run(
    warm: Warm, scheduler: str, tmp_path: Path
) -> None:
    whole, fanned = tmp_path / "whole.warm", tmp_path / "fanned.warm"
    proc = warm("run", EXAMPLES / "matmul_host.py", "-b", whole, "-q")
    assert proc.returncode == 0, proc.stderr
    doc = _fanned_out(warm, scheduler, fanned, EXAMPLES / "matmul_host.py")
    assert doc["passes"][0]["compilation"]["compiled"] == 0  # the verify pass, here
    assert _keys(fanned) == _keys(whole)


def test_dask_fan_out_compile_only_for_an_arch(warm: Warm, scheduler: str, tmp_path: Path) -> None:
    from warmcli.backends.cuda.nvcc import find_nvcc
    from warmcli.backends.toolchain import ToolchainError

    try:
        find_nvcc()
    except ToolchainError as exc:  # pragma: no cover - make test installs nvcc
        pytest.skip(f"nvcc not found: {exc}")
    # Verified compile-only: every kernel of every shard, every tune recorded as pending.
    doc = _fanned_out(
        warm, scheduler, tmp_path / "sm90.warm", EXAMPLES / "saxpy_cuda.py", "--arch", "sm_90"
    )
    assert doc["passes"][0]["compilation"]["queued"] == 0
    assert sum(s["stored"]["kernels"] for s in doc["shards"]) >= doc["merge"]["kernels"] > 0


def test_gpu_runs_go_to_the_workers_holding_a_gpu_pure_logic() -> None:
    workers = {
        "tcp://b": {"resources": {"GPU": 1}},
        "tcp://a": {"resources": {}},
        "tcp://c": {"resources": {"GPU": 2}},
    }
    assert shard_workers(workers, gpu=True) == ["tcp://b", "tcp://c"]
    assert shard_workers(workers, gpu=False) == ["tcp://a", "tcp://b", "tcp://c"]
    no_gpu = {"tcp://a": {}, "tcp://b": {"resources": None}}
    assert shard_workers(no_gpu, gpu=True) == ["tcp://a", "tcp://b"]  # host and compile-only
