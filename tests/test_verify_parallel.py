"""`warm verify` checks the tunes of a large bundle in several processes: its report is
the one a check in one process makes, corrupt rows named in the same order, and a
worker that cannot read its range leaves it to the caller."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.big_bundle import build_big
from warmcli.bundle import checking
from warmcli.bundle.store import Bundle
from warmcli.ops.verify import IntegrityReport, check_bundle


@pytest.fixture(scope="module")
def corrupt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = build_big(tmp_path_factory.mktemp("par") / "big.warm", kernels=6, tunes=300)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE tunes SET candidates = x'07' WHERE rowid IN (5, 150)")
        conn.execute("UPDATE tunes SET pick = 'nope' WHERE rowid = 299")
        conn.execute("UPDATE tunes SET measured_at = -1 WHERE rowid = 1")
    conn.close()
    return path


def _report(path: Path, monkeypatch: pytest.MonkeyPatch, workers: int) -> IntegrityReport:
    monkeypatch.setattr(checking, "PARALLEL_TUNES", 1 if workers > 1 else 10**9)
    monkeypatch.setattr(checking, "worker_count", lambda: workers)
    return check_bundle(path)


def _never(*_: object) -> None:
    return None  # as a worker whose path names another file now


def _failing(*_: object) -> None:
    raise OSError("a worker that fails")


def test_several_processes_report_as_one(corrupt: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one = _report(corrupt, monkeypatch, 1)
    with sqlite3.connect(corrupt) as conn:
        order = "SELECT hex(key) FROM tunes WHERE rowid IN (1, 5, 150, 299) ORDER BY rowid"
        keys = [k[:16].lower() for (k,) in conn.execute(order)]  # stored as bytes (format 3)
    conn.close()
    assert one.tunes == 300 and [p.split("'")[1] for p in one.problems] == keys
    here = os.getpid()
    read = Bundle.tunes_between

    def elsewhere(self: Bundle, *args: Any) -> Any:
        assert os.getpid() != here, "a range was read by the caller, not a worker"
        return read(self, *args)

    monkeypatch.setattr(Bundle, "tunes_between", elsewhere)
    for workers in (2, 3, 7):
        assert _report(corrupt, monkeypatch, workers) == one


@pytest.mark.parametrize("worker", [_never, _failing])
def test_a_range_no_worker_read_is_read_here(
    corrupt: Path, monkeypatch: pytest.MonkeyPatch, worker: object
) -> None:
    one = _report(corrupt, monkeypatch, 1)
    monkeypatch.setattr(checking, "_check_range", worker)
    assert _report(corrupt, monkeypatch, 3) == one
