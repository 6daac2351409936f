"""`warm verify` checks every field `warm stats` reads: a kernel row whose `created` or
`last_used` is no number made `warm stats` refuse the bundle ('corrupt kernel entry ...
(last_used: a str, not a number)', exit 2) while `warm verify` called it sound (exit 0),
and a download so corrupt passed the soundness check before it was published."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


@pytest.mark.parametrize(("column", "value"), [("last_used", "'abc'"), ("created", "x'00'")])
def test_verify_names_a_kernel_row_whose_times_are_no_numbers(
    warm: Warm, host_bundle, tmp_path: Path, column: str, value: str
) -> None:
    bundle = host_bundle(tmp_path / "b.warm")
    conn = sqlite3.connect(bundle)
    conn.execute(f"UPDATE kernels SET {column} = {value} WHERE rowid = 1")
    conn.commit()
    conn.close()
    stats = warm("stats", bundle)
    assert stats.returncode == 2 and f"({column}: " in stats.stderr, stats.stderr
    verify = warm("verify", bundle)
    assert verify.returncode == 1, verify.stdout + verify.stderr
    assert "corrupt kernel entry" in verify.stdout and f"({column}: " in verify.stdout, (
        verify.stdout
    )
