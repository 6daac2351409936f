"""Holes review59 found reading stop 59's merges (tune59, fold59, install59), each reproduced
for real: the real CLI in a subprocess, a real bundle from `warm run` (the host example, built
by the system C compiler), edited with sqlite3 as an attacker would.

tune59 bounded the width of a tune's median and ratio as `warm stats` and `warm diff` show
them (a row's times are untrusted, kept up to 2^993 s); a kernel's compile time, the column
beside it in the same listing and as untrusted (any finite time not negative is kept), was
still shown with every digit: 1e200 s a cell of 204 characters.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

from conftest import Warm

LONG_NUMBER = re.compile(r"[0-9][0-9,.]{24,}")  # a figure of more than 25 characters


def _compile_time(good: Path, out: Path, seconds: float) -> Path:
    """`good` copied to `out`, its first kernel's compile time `seconds`."""
    shutil.copyfile(good, out)
    with sqlite3.connect(out) as conn:
        conn.execute(
            "UPDATE kernels SET seconds = ? WHERE rowid = (SELECT min(rowid) FROM kernels)",
            (seconds,),
        )
    conn.close()
    return out


def test_a_hostile_compile_time_is_shown_in_a_figure_of_bounded_width(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """Before: `warm stats` showed a kernel's compile time of 1e200 s as `99999...671.000`
    (204 characters). Now it reads `1e+200`; a real one keeps its three decimals."""
    warm, good = made
    edited = _compile_time(good, tmp_path / "edited.warm", 1e200)
    for bundle in (good, edited):
        shown = warm("stats", bundle)
        assert shown.returncode == 0, shown.stderr
        assert not LONG_NUMBER.search(shown.stdout), LONG_NUMBER.search(shown.stdout)
        assert re.search(r"\b[0-9]+\.[0-9]{3}\b", shown.stdout), shown.stdout  # (real ones)
    assert "1e+200" in warm("stats", edited).stdout
