"""`warm stats` on a bundle too large to list: counts from SQL aggregates, a few tunes shown.

The bundle is the benchmark's synthetic one (real schema, real SQLite file), built
small; `--explain` and `--json` still give every entry.
"""

from __future__ import annotations

import json
from pathlib import Path

from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from bench.scale import OPERATIONS, build
from warmcli.bundle.store import Bundle
from warmcli.ops.stats import LARGE_TUNES, SAMPLE_TUNES, large_summary


def test_large_bundle_is_summarised_by_group(tmp_path: Path) -> None:
    path = tmp_path / "big.warm"
    kernels, tunes, _ = build(path, 30, LARGE_TUNES + 100)
    summary = large_summary(path)
    assert summary is not None
    assert summary.kernel_count == len(kernels) and summary.tune_count == len(tunes)
    assert [op for op, *_ in summary.tunes] == sorted(f"op{i}" for i in range(OPERATIONS))
    assert len(summary.sample) == SAMPLE_TUNES  # a few of each operation, not one operation
    assert len({t.operation for t in summary.sample}) == min(SAMPLE_TUNES, OPERATIONS)
    with Bundle.open(path) as bundle:
        held = {t.key: t for t in bundle.tunes()}
    assert all(held[t.key] == t for t in summary.sample)


def test_small_bundle_is_listed_whole(tmp_path: Path) -> None:
    path = tmp_path / "small.warm"
    build(path, 3, 5)
    assert large_summary(path) is None


def test_stats_command_on_a_large_bundle(warm, tmp_path: Path) -> None:
    path = tmp_path / "big.warm"
    _, tunes, _ = build(path, 30, LARGE_TUNES + 100)
    proc = warm("stats", path)
    assert proc.returncode == 0, proc.stderr
    assert f"{SAMPLE_TUNES} of {len(tunes)} tunes" in proc.stdout
    assert "op7 on sm_90" in proc.stdout
    explained = warm("stats", path, "--explain", "op7")
    assert explained.returncode == 0, explained.stderr
    assert "op7 " in explained.stdout and "op8 " not in explained.stdout
    doc = json.loads(warm("stats", path, "--json").stdout)
    assert len(doc["tunes"]) == len(tunes)
