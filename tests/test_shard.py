"""`warm run --shard I/N`: N shard bundles merged hold what one run stores, and verify.

The CLI runs in subprocesses over the real host compiler and real bundles; the
partition and launcher-variable parsing are pure logic, tested directly.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.bundle.store import Bundle
from warmcli.runtime.shard import (
    LAUNCHERS,
    Shard,
    ShardError,
    resolve_shard,
    shard_from_environment,
)

LAUNCHER_VARS = {v for group in LAUNCHERS for v in group if v} | {"WARM_SHARD"}


# -- pure logic ------------------------------------------------------------------------------


def test_partition_is_deterministic_and_covers_every_key_once() -> None:
    tokens = [f"key{i}" for i in range(400)]
    owners = [[s for s in range(4) if Shard(s, 4).owns(t)] for t in tokens]
    assert all(len(o) == 1 for o in owners)
    assert {o[0] for o in owners} == {0, 1, 2, 3}
    assert owners == [[s for s in range(4) if Shard(s, 4).owns(t)] for t in tokens]


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"WARM_SHARD": "2/4"}, Shard(2, 4)),
        ({"WARM_SHARD": ""}, None),
        ({"WARM_SHARD": "  "}, None),  # blank is none, as for every variable (stop 60)
        ({"WARM_SHARD": " ", "RANK": "1", "WORLD_SIZE": "2"}, Shard(1, 2)),
        ({"JOB_COMPLETION_INDEX": "3", "WARM_SHARD_COUNT": "4"}, Shard(3, 4)),
        ({"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "4"}, None),  # outside
        (
            {
                "SLURM_ARRAY_TASK_ID": "4",
                "SLURM_ARRAY_TASK_COUNT": "4",
                "SLURM_ARRAY_TASK_MIN": "1",
            },
            Shard(3, 4),
        ),
        ({"RANK": "1", "WORLD_SIZE": "2"}, Shard(1, 2)),
        ({"RANK": "0", "WORLD_SIZE": "1"}, None),
    ],
)
def test_launcher_variables_pure_logic(env: dict[str, str], expected: Shard | None) -> None:
    if "SLURM_ARRAY_TASK_MIN" not in env and env.get("SLURM_ARRAY_TASK_ID") == "4":
        with pytest.raises(ShardError, match=r"outside 0\.\.3"):
            shard_from_environment(env)
        return
    assert shard_from_environment(env) == expected


@pytest.mark.parametrize("text", ["4/4", "a/4", "1", "-1/4", "1/0"])
def test_bad_shards_are_refused_pure_logic(text: str) -> None:
    with pytest.raises(ShardError):
        resolve_shard(text, {})
    with pytest.raises(ShardError, match="WARM_SHARD_COUNT"):
        shard_from_environment({"JOB_COMPLETION_INDEX": "0"})


# -- the real CLI ----------------------------------------------------------------------------


def _keys(bundle: Path) -> tuple[set[str], set[str]]:
    with Bundle.open(bundle) as b:
        return {k.key for k in b.kernels()}, {t.key for t in b.tunes()}


def _run_shards(warm: Warm, workload: Path, tmp_path: Path, env: dict[str, str]) -> list[Path]:
    """Four shards at once, each told its shard a different way: --shard, an indexed
    Kubernetes job, a Slurm array counted from 1, torchrun's rank."""
    given: list[tuple[list[str], dict[str, str]]] = [
        (["--shard", "0/4"], {}),
        ([], {"JOB_COMPLETION_INDEX": "1", "WARM_SHARD_COUNT": "4"}),
        (
            [],
            {
                "SLURM_ARRAY_TASK_ID": "3",
                "SLURM_ARRAY_TASK_COUNT": "4",
                "SLURM_ARRAY_TASK_MIN": "1",
            },
        ),
        ([], {"RANK": "3", "WORLD_SIZE": "4"}),
    ]
    bundles = [tmp_path / f"shard{i}.warm" for i in range(4)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "warmcli", "run", workload, "-b", b, "--json", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**env, **extra},
            cwd=ROOT,
        )
        for b, (args, extra) in zip(bundles, given, strict=True)
    ]
    for i, proc in enumerate(procs):
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        doc = json.loads(stdout)
        assert doc["shard"] == f"{i}/4" and doc["verified"] is True
        # The tunes a shard measured are exactly the ones it stored: no other shard's.
        measured = sum(p["autotune"]["measured"] for p in doc["passes"])
        assert measured == doc["stored"]["tunes"]
    return bundles


@pytest.mark.parametrize("example", ["matmul_host.py", "many_kernels_host.py"])
def test_four_shards_merged_equal_one_run(
    warm: Warm, tmp_path: Path, example: str, host_bundle: Callable[[Path], Path]
) -> None:
    env = {k: v for k, v in warm.env.items() if k not in LAUNCHER_VARS}
    warm.env = env
    workload = EXAMPLES / example
    whole = tmp_path / "whole.warm"
    if example == "matmul_host.py":  # conftest's `warm run matmul_host.py -b B -q`, made once
        host_bundle(whole)
    else:
        assert warm("run", workload, "-b", whole, "-q").returncode == 0
    shards = _run_shards(warm, workload, tmp_path, env)
    parts = [_keys(b) for b in shards]
    tune_sets = [t for _, t in parts]
    assert sum(len(t) for t in tune_sets) == len(set().union(*tune_sets))  # disjoint
    merged = tmp_path / "merged.warm"
    proc = warm("merge", *shards, "-o", merged)
    assert proc.returncode == 0, proc.stderr
    kernels, tunes = _keys(whole)
    assert _keys(merged) == (kernels, tunes)
    if example == "many_kernels_host.py":
        assert (len(kernels), len(tunes)) == (200, 40)
    proc = warm("verify", merged, "--workload", workload)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "compiled 0 kernels, measured 0 tunes" in proc.stdout


def test_a_bad_shard_is_one_line_and_exit_2(warm: Warm, tmp_path: Path) -> None:
    bundle = tmp_path / "b.warm"
    proc = warm("run", EXAMPLES / "matmul_host.py", "-b", bundle, "--shard", "4/4")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "need 0 <= I < N" in proc.stderr and not bundle.exists()
