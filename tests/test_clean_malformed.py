"""`warm clean` removes a malformed kernel or tune row (reason `corrupt`, as a kernel whose
blob fails its sha256): it stopped at exit 2 naming the row, so a bundle with one row a
workload no longer reaches could never be repaired. The real CLI over a real bundle,
edited with plain SQL; `warm verify` passes afterwards and every sound entry is kept.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from forked_cli import ForkedWarm

SPOIL = (
    "UPDATE kernels SET seconds = 'abc' WHERE entry = 'row_sum'",
    "UPDATE tunes SET pick = 'tile999' WHERE rowid = (SELECT min(rowid) FROM tunes)",
)


@pytest.fixture(scope="module")
def made(made: tuple[Warm, Path], forking_servers: Any) -> tuple[Any, Path]:
    """conftest's `made`, its `warm` forked as `warm` is here (`tests/forked_cli.py`)."""
    warm, good = made
    return ForkedWarm(warm, forking_servers), good


def _counts(path: Path) -> tuple[int, int]:
    conn = sqlite3.connect(path)
    try:
        return tuple(
            conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("kernels", "tunes")
        )  # type: ignore[return-value]
    finally:
        conn.close()


def test_clean_removes_malformed_rows_and_keeps_the_rest(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    kernels, tunes = _counts(good)
    bundle = tmp_path / "b.warm"
    shutil.copyfile(good, bundle)
    conn = sqlite3.connect(bundle)
    for sql in SPOIL:
        assert conn.execute(sql).rowcount == 1
    conn.commit()
    conn.close()

    dry = warm("clean", bundle, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    report = json.loads(dry.stdout)
    assert report["removed_count"] == {"kernels": 1, "tunes": 1}, report
    reasons = [r["reason"] for r in report["removed"]]
    assert all(r.startswith("corrupt") for r in reasons), reasons
    assert "seconds" in json.dumps(report) and "tile999" in json.dumps(report)
    assert _counts(bundle) == (kernels, tunes)  # a dry run changes nothing

    proc = warm("clean", bundle)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "removed 1 kernel(s) and 1 tune(s)" in proc.stdout, proc.stdout
    assert _counts(bundle) == (kernels - 1, tunes - 1)
    verified = warm("verify", bundle)
    assert verified.returncode == 0, verified.stdout + verified.stderr
