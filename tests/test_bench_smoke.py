"""Smoke test: every benchmark runs at a tiny size and yields well-formed rows.

No figure is checked here (speed targets live in `make bench`); only that each
family runs end to end on this machine and reports every row it names.
"""

from __future__ import annotations

import json
from pathlib import Path

from bench.__main__ import main
from bench.suite import FAMILIES

KEYS = {"name", "ratio", "target", "met", "detail"}


def test_every_benchmark_runs_at_a_tiny_size(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    assert main(["--tiny", "--out", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["name"] for r in rows] == [n for _, names in FAMILIES.values() for n in names]
    for row in rows:
        assert set(row) == KEYS, row
        assert not row["detail"].startswith("error:"), row
        if row["met"] is None:
            assert row["ratio"] is None and row["detail"].startswith("skipped:"), row
        else:
            assert isinstance(row["ratio"], float) and isinstance(row["met"], bool), row
