"""An attacker's review of warm's newest readers (u1h): each hand-crafted bundle here broke
a reader before its fix. A production process given one serves what it can, misses the
rest and exits cleanly; a command gives one clear line. Real files, written with sqlite3;
the real CLI and real production processes in subprocesses."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from conftest import EXAMPLES, ROOT, SERVE_MATMUL, Warm

SERVE = SERVE_MATMUL.format(examples=str(EXAMPLES)) + "print(r)\n"
ESCAPES = "\x1b[31m\x1b]0;pwned\x07"


def crafted(good: Path, path: Path, *statements: str) -> Path:
    shutil.copyfile(good, path)
    conn = sqlite3.connect(path)
    with conn:
        for statement in statements:
            conn.execute(statement)
    conn.close()
    return path


def serve(warm: Warm, path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SERVE],
        capture_output=True,
        text=True,
        env=dict(warm.env, WARM_BUNDLE=str(path), **env),
        timeout=120,
        cwd=ROOT,
    )


def test_a_tune_miss_explained_over_rows_sqlite_cannot_hand_back_is_a_miss_not_a_crash(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A tune the bundle lacks is explained against the operation's other rows: one of them
    text SQLite cannot decode (invalid UTF-8, escapes after it) or a value longer than warm
    reads stops that listing. The miss is explained as corrupt, logged escaped; never a
    traceback that prints the row's escapes raw."""
    warm, good = made
    bad_key = "CAST(x'ff1b5b33316d1b5d303b70776e6507' AS TEXT)"  # \xff, then ESC[31m, OSC title
    cases = {
        "undecodable": (f"UPDATE tunes SET key = {bad_key} WHERE rowid = 1",),
        "too-long": (
            "UPDATE tunes SET key = x'00' || key WHERE rowid = 1",
            "UPDATE tunes SET shape_key = zeroblob(20000000) WHERE rowid = 2",
        ),
    }
    for name, statements in cases.items():
        path = crafted(good, tmp_path / f"{name}.warm", *statements)
        for env in ({}, {"WARM_EXPLAIN": "1"}):
            proc = serve(warm, path, **env)
            out = proc.stdout + proc.stderr
            assert proc.returncode == 0, (name, env, out)
            assert "Traceback" not in out and "\x1b" not in out, (name, env, out)
            if env:
                assert "corrupt" in proc.stderr, (name, proc.stderr)
