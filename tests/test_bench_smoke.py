"""Smoke test: every benchmark runs at a tiny size and yields well-formed rows.

No figure is checked here (speed targets live in `make bench`); only that each
family runs end to end on this machine and reports every row it names. One test
per family (`--only`), so that `pytest -n` spreads them over its workers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.__main__ import main
from bench.rows import TINY
from bench.suite import FAMILIES, run

KEYS = {"name", "ratio", "target", "met", "detail"}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_benchmark_runs_at_a_tiny_size(tmp_path: Path, family: str) -> None:
    out = tmp_path / "results.json"
    assert main(["--tiny", "--only", family, "--out", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["name"] for r in rows] == list(FAMILIES[family][1])
    for row in rows:
        assert set(row) == KEYS, row
        assert not row["detail"].startswith("error:"), row
        if row["met"] is None:
            assert row["ratio"] is None and row["detail"].startswith("skipped:"), row
        else:
            assert isinstance(row["ratio"], float) and isinstance(row["met"], bool), row


def test_the_families_run_in_order_whatever_only_says() -> None:
    """What the one whole run asserted of the order, the rest being each family's test
    above: a run yields its families' rows in `FAMILIES`' order (`make bench`'s), not
    `--only`'s, every row named once (two of the cheapest families, run for real)."""
    names = [n for _, names in FAMILIES.values() for n in names]
    assert len(names) == len(set(names))
    late, early = "shard", "cuda_start"
    assert list(FAMILIES).index(early) < list(FAMILIES).index(late)
    rows = run(TINY, [late, early])
    assert [r.name for r in rows] == [*FAMILIES[early][1], *FAMILIES[late][1]]
