"""`warm diff` reads each bundle in one read transaction: while it checks the rows (its
tune checks may run in other processes, each reading the file on its own), a writer
cannot commit, so every reader sees the same state. A real bundle, a real second
connection trying to commit in the middle of the diff."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm

from warmcli.ops import diff as diff_module


def test_a_writer_cannot_commit_while_diff_checks_the_rows(
    warm: Warm,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    host_bundle: Callable[[Path], Path],
) -> None:
    a, b = tmp_path / "a.warm", tmp_path / "b.warm"
    host_bundle(a)  # as `warm run examples/matmul_host.py -b a.warm -q` makes it
    b.write_bytes(a.read_bytes())
    commits: list[str] = []
    real = diff_module.TuneChecks

    class WriterMeanwhile(real):  # type: ignore[misc, valid-type]
        """The tune checks, once a writer has tried to commit to the bundle checked."""

        def __init__(self, bundle: Any, *args: Any) -> None:
            writer = sqlite3.connect(bundle.path, timeout=0, isolation_level=None)
            try:
                writer.execute("BEGIN IMMEDIATE")
                writer.execute("INSERT INTO manifest VALUES ('meanwhile', 'x')")
                writer.execute("COMMIT")
                commits.append("committed")
            except sqlite3.OperationalError as exc:
                commits.append(str(exc))
                writer.execute("ROLLBACK")
            finally:
                writer.close()
            super().__init__(bundle, *args)

    monkeypatch.setattr(diff_module, "TuneChecks", WriterMeanwhile)
    diff_module.diff_bundles(a, b)
    assert commits == ["database is locked", "database is locked"]
    with sqlite3.connect(a) as conn:
        assert (
            conn.execute("SELECT count(*) FROM manifest WHERE key = 'meanwhile'").fetchone()[0] == 0
        )
