"""What `warm verify` says of a tune status warm never writes names the fault: a code
(format 3 stores a status as one) is named as a code; it said "status: a int, not text".
The real CLI over a real bundle edited with plain SQL.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_made, forked_warm  # noqa: F401  (conftest's, commands forked)

FIRST = "WHERE rowid = (SELECT min(rowid) FROM {})"
CASES = {
    "status code": (
        f"UPDATE tunes SET status = 99 {FIRST.format('tunes')}",
        "status: code 99 is not a tune status",
    ),
    "status as text": (
        f"UPDATE tunes SET status = 'done' {FIRST.format('tunes')}",
        "status: 'done' is not a tune status",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_verify_names_a_malformed_field_in_plain_words(
    made: tuple[Warm, Path], tmp_path: Path, case: str
) -> None:
    warm, good = made
    sql, said = CASES[case]
    bundle = tmp_path / "b.warm"
    shutil.copyfile(good, bundle)
    conn = sqlite3.connect(bundle)
    assert conn.execute(sql).rowcount == 1
    conn.commit()
    conn.close()
    proc = warm("verify", bundle)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert said in proc.stdout, proc.stdout
    assert " a int" not in proc.stdout, proc.stdout
