"""`warm run --dask SCHEDULER` against a real local Dask cluster (worker processes): the
shards fanned out, merged and verified equal one run, on the host and for `--arch`, with
the summed statistics and the progress of a local run; an unreachable scheduler is one
line and exit 2, quickly."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm
from dask_cluster import WORKERS, SharedCluster
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.bundle.store import Bundle
from warmcli.warming.fanout import CONNECT_TIMEOUT, shard_workers
from warmcli.warming.shard_reports import shard_passes

distributed = pytest.importorskip("distributed")
# WORKERS: the shared cluster's 2 (a shard per worker: two show every path three did)


@pytest.fixture(scope="module")
def scheduler(shared_cluster: SharedCluster) -> Iterator[str]:
    with shared_cluster.using() as address:
        yield address


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
    one = warm.json("run", EXAMPLES / "matmul_host.py", "-b", whole)
    doc = _fanned_out(warm, scheduler, fanned, EXAMPLES / "matmul_host.py")
    assert _keys(fanned) == _keys(whole)
    # The shards' passes summed, as one run's, then the verify pass here.
    assert [p["mode"] for p in doc["passes"]] == [p["mode"] for p in one["passes"]]
    assert doc["passes"][-1]["compilation"]["compiled"] == 0  # the verify pass, here
    for summed, local in zip(doc["passes"][:2], one["passes"][:2], strict=True):
        for view in ("compilation", "autotune"):  # a shard may meet what another builds
            assert summed[view]["registered"] >= local[view]["registered"], summed["mode"]
    work = doc["passes"][1]
    assert work["compilation"]["compiled"] >= one["passes"][1]["compilation"]["compiled"] > 0
    assert work["autotune"]["measured"] == one["passes"][1]["autotune"]["measured"] > 0  # once
    assert work["devices"] and doc["devices"] == one["devices"]


def test_dask_run_shows_progress_and_the_tables_of_a_local_run(
    warm: Warm, scheduler: str, tmp_path: Path
) -> None:
    proc = warm("run", EXAMPLES / "matmul_host.py", "-b", tmp_path / "b.warm", "--dask", scheduler)
    assert proc.returncode == 0, proc.stderr
    finished = [line for line in proc.stdout.splitlines() if line.startswith("shard ")]
    assert len(finished) == WORKERS and all(" on tcp://" in line for line in finished)
    for title in ("Pass 1 · CompileOnly", "Pass 2 · CompileAndAutotune", "Pass 3 · Verify"):
        assert title in proc.stdout
    assert "the bundle is complete" in proc.stdout


def _not_dask() -> Iterator[str]:
    """A port where something answers that speaks no Dask (an HTTP server's reply)."""
    server = socket.create_server(("127.0.0.1", 0))

    def answer() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = server.accept()
                with conn:
                    conn.sendall(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=answer, daemon=True).start()
    yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    server.close()


@pytest.mark.parametrize("listening", [False, True])
def test_an_unreachable_scheduler_is_one_line_and_exit_2_quickly(
    warm: Warm, tmp_path: Path, listening: bool
) -> None:
    with contextlib.ExitStack() as stack:
        if listening:
            address = stack.enter_context(contextlib.contextmanager(_not_dask)())
        else:
            with socket.socket() as sock:  # a port nothing listens on
                sock.bind(("127.0.0.1", 0))
                address = f"tcp://127.0.0.1:{sock.getsockname()[1]}"
        started = time.perf_counter()
        bundle = tmp_path / "b.warm"
        proc = warm("run", EXAMPLES / "matmul_host.py", "-b", bundle, "--dask", address)
        assert time.perf_counter() - started < CONNECT_TIMEOUT + 20
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"warm: error: dask scheduler {address} unreachable")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not bundle.exists()


def test_shard_passes_sum_the_shards_pure_logic() -> None:
    def shard(compiled: int, measured: int, seconds: float, device: str) -> dict:
        stats = {
            "compilation": {"registered": compiled, "compiled": compiled, "settled": compiled},
            "autotune": {"registered": measured, "measured": measured, "candidates_measured": 3},
            "execution": {"executed": 1},
        }
        work = {"mode": "CompileAndAutotune", "seconds": seconds, **stats, "notes": ["n"]}
        work |= {"devices": {device: stats}, "commands": ["cc -O2 'a b.c'"]}
        return {"passes": [{"mode": "CompileOnly", "commands": []}, work]}

    first, work = shard_passes([shard(2, 1, 1.5, "host"), shard(3, 0, 2.5, "host")])
    assert first.mode == "CompileOnly" and first.total.compilation.registered == 0
    assert work.seconds == 2.5  # the slowest shard's
    assert work.total.compilation.compiled == work.per_device["host"].compilation.compiled == 5
    assert work.total.autotune.measured == 1 and work.total.autotune.candidates_measured == 6
    assert work.total.execution.executed == 2 and work.notes == ["n"]
    assert [c.argv for c in work.commands] == [("cc", "-O2", "a b.c")] * 2


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
    assert doc["passes"][-1]["compilation"]["queued"] == 0  # the verify pass
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


ONE_BAD = """\
import numpy as np
from warmcli import Kernel

DEVICE = "host"
GOOD = [Kernel("void k(int *x) { x[0] = V; }", "k", "P", defines={"V": v}) for v in range(12)]
BAD = Kernel("void k(int *x) { x[0] = undeclared; }", "k", "P", defines={"V": 99})

def workload(rt):
    x = rt.upload(np.zeros(1, np.int32))
    for kernel in [*GOOD, BAD]:
        rt.launch(kernel, x)
"""


def test_a_failing_shard_leaves_what_the_others_built_stored(
    warm: Warm, scheduler: str, tmp_path: Path, workload_file
) -> None:
    """One shard's kernel does not compile: `warm run --dask` says so (exit 2) and the
    kernels the other shards built are merged into the bundle, not thrown away."""
    bundle = tmp_path / "b.warm"
    proc = warm("run", workload_file(ONE_BAD), "-b", bundle, "--dask", scheduler)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "failed" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    kernels, _ = _keys(bundle)
    assert 0 < len(kernels) < 13, proc.stderr


def test_the_cuda_compiler_chosen_here_is_the_shards(
    warm: Warm, scheduler: str, tmp_path: Path
) -> None:
    """`WARM_CUDA_COMPILER=nvcc warm run --dask`: every shard builds with nvcc, as the run
    would here (each worker's own environment chose NVRTC, with other kernel keys)."""
    from warmcli.backends.cuda.nvcc import find_nvcc
    from warmcli.backends.toolchain import ToolchainError

    try:
        find_nvcc()
    except ToolchainError as exc:  # pragma: no cover - make test installs nvcc
        pytest.skip(f"nvcc not found: {exc}")
    bundle = tmp_path / "nvcc.warm"
    chosen = warm.with_env(WARM_CUDA_COMPILER="nvcc")  # (forked, as `warm` is)
    _fanned_out(chosen, scheduler, bundle, EXAMPLES / "saxpy_cuda.py", "--arch", "sm_90")
    with Bundle.open(bundle) as b:
        toolchains = {k.toolchain.split(":", 1)[0] for k in b.kernels()}
    assert toolchains == {"nvcc"}, toolchains
