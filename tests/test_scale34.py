"""Scale: what a fleet's large bundles cost the commands that maintain them.

Each test keeps the shape of a problem met on bundles of tens of thousands of kernels,
scaled down and counted (commits, not seconds), so it holds on a loaded machine.
"""

from __future__ import annotations

import sqlite3
import struct
from pathlib import Path

import big_bundle
import pytest
from big_bundle import build_big
from conftest import Warm

KERNELS = 300  # each with a binary of its own, as real kernels have


def _commits(path: Path) -> int:
    """SQLite's file change counter (header bytes 24-27): one per committed write."""
    with path.open("rb") as f:
        return int(struct.unpack(">I", f.read(100)[24:28])[0])


def test_merge_commits_once_not_once_per_binary(
    warm: Warm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: a merge wrote each binary (with its kernels) in a transaction of its own,
    # a commit and a file sync per kernel: 8 shards of 2,000 kernels took 16,000 commits,
    # most of the merge's time, minutes on a fleet's 100,000 kernels.
    monkeypatch.setattr(big_bundle, "BLOBS", KERNELS)
    a = build_big(tmp_path / "a.warm", KERNELS, 20)
    out = tmp_path / "out.warm"
    done = warm("merge", "-o", out, a)
    assert done.returncode == 0, done.stderr
    assert f"{KERNELS} kernel(s)" in done.stdout
    with sqlite3.connect(out) as conn:
        assert conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == KERNELS
    assert _commits(out) < 20

