"""`warm run --dask SCHEDULER` against a real local Dask cluster (worker processes): the
shards fanned out, merged and verified equal one run, on the host and for `--arch`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm

from warmcli.bundle import Bundle

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


def _fanned_out_equals_one_run(
    warm: Warm, scheduler: str, tmp_path: Path, *args: str | Path
) -> dict:
    whole, fanned = tmp_path / "whole.warm", tmp_path / "fanned.warm"
    proc = warm("run", *args, "-b", whole, "-q")
    assert proc.returncode == 0, proc.stderr
    doc = warm.json("run", *args, "-b", fanned, "--dask", scheduler)
    assert doc["verified"] is True and not doc["missing"]
    assert sorted(s["shard"] for s in doc["shards"]) == [f"{i}/{WORKERS}" for i in range(WORKERS)]
    assert len({s["worker"] for s in doc["shards"]}) == WORKERS  # one shard per worker
    assert _keys(fanned) == _keys(whole)
    return doc


def test_dask_fan_out_on_the_host(warm: Warm, scheduler: str, tmp_path: Path) -> None:
    doc = _fanned_out_equals_one_run(warm, scheduler, tmp_path, EXAMPLES / "matmul_host.py")
    assert doc["passes"][0]["compilation"]["compiled"] == 0


def test_dask_fan_out_compile_only_for_an_arch(warm: Warm, scheduler: str, tmp_path: Path) -> None:
    from warmcli.cuda.nvcc import find_nvcc
    from warmcli.toolchain import ToolchainError

    try:
        find_nvcc()
    except ToolchainError as exc:  # pragma: no cover - make test installs nvcc
        pytest.skip(f"nvcc not found: {exc}")
    _fanned_out_equals_one_run(
        warm, scheduler, tmp_path, EXAMPLES / "saxpy_cuda.py", "--arch", "sm_90"
    )
