"""`warm diff` where a malformed row is held by one bundle only, or is a tune key both hold
whose pick differs: the row is listed under the bundle that cannot serve it and the diff
exits 1, as for any corrupt entry (it stopped at exit 2 with no report, reading the row
whole to list it as "only in" or as a changed pick). The real CLI over real bundles,
edited with plain SQL.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_made, forked_warm  # noqa: F401  (conftest's, commands forked)

FIRST_TUNE = "WHERE rowid = (SELECT min(rowid) FROM tunes)"


def _edited(good: Path, to: Path, *sql: str) -> Path:
    shutil.copyfile(good, to)
    conn = sqlite3.connect(to)
    for statement in sql:
        assert conn.execute(statement).rowcount >= 1, statement
    conn.commit()
    conn.close()
    return to


CASES = {
    "pick differs, B's is no candidate": (
        (),
        (f"UPDATE tunes SET pick = 'tile999' {FIRST_TUNE}",),
        "is not one of its candidates",
    ),
    "pick differs, B's measured tune has none": (
        (),
        (f"UPDATE tunes SET pick = NULL {FIRST_TUNE}",),
        "a measured tune with no pick",
    ),
    "a tune only in B": (
        ("DELETE FROM tunes",),
        (f"UPDATE tunes SET candidates = X'00' {FIRST_TUNE}",),
        "candidates",
    ),
    "a kernel only in B": (
        ("DELETE FROM kernels WHERE entry = 'row_sum'",),
        ("UPDATE kernels SET seconds = 'abc' WHERE entry = 'row_sum'",),
        "seconds",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_diff_lists_a_corrupt_row_and_exits_1(
    made: tuple[Warm, Path], tmp_path: Path, case: str
) -> None:
    warm, good = made
    a_sql, b_sql, problem = CASES[case]
    a = _edited(good, tmp_path / "a.warm", *a_sql) if a_sql else good
    b = _edited(good, tmp_path / "b.warm", *b_sql)

    table = warm("diff", a, b)
    assert table.returncode == 1, table.stdout + table.stderr
    assert "error" not in table.stderr and "Traceback" not in table.stderr, table.stderr
    assert "Corrupt in B (1" in table.stdout and problem in table.stdout, table.stdout

    doc = warm("diff", a, b, "--json")
    assert doc.returncode == 1, doc.stdout + doc.stderr
    report = json.loads(doc.stdout)
    assert "error" not in report, report
    [entry] = report["corrupt"]["b"]
    assert problem in entry, report["corrupt"]
    assert report["tunes"]["picks_changed_count"] == 0  # a row B cannot read changed no pick
    for kind in ("kernels", "tunes"):  # what is counted "only in" is what is listed
        for side in ("only_a", "only_b"):
            assert report[kind][f"{side}_count"] == len(report[kind][side]), report[kind]
