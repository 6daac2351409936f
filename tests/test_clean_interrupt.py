"""Ctrl-C on `warm clean` once its removals are committed (while it vacuums the file, or
closes it) says what was removed, and that it is kept: it said only `warm: interrupted`, as if
nothing had changed, while the bundle had lost every entry it listed. The real CLI in a
subprocess over a real bundle (`tests/big_bundle.py`'s: sound rows as warm writes them, built
with SQL, not a `warm run` of as many kernels), SIGINT sent the moment a reader sees the removal.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from big_bundle import build_big
from conftest import ROOT, Warm

# Kernels over `big_bundle.BLOBS` binaries of 4 KiB, a fifth as many tunes: `--max-size` evicts
# all but the kernels of two binaries, and the file the vacuum rewrites is larger than the
# 1,000 host kernels a `warm run` made before (1.7 MB), so SIGINT lands as often.
KERNELS = 4000
LIMIT = "10K"


def _count(path: Path) -> int | None:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.01)
        try:
            return int(conn.execute("SELECT count(*) FROM kernels").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return None


def test_ctrl_c_after_the_removal_says_what_was_removed(warm: Warm, tmp_path: Path) -> None:
    source = build_big(tmp_path / "many.warm", KERNELS, KERNELS // 5)
    seen = 0
    for _ in range(5):  # the removal is seen (once vacuumed), then SIGINT lands
        if seen:
            break  # (the case this is for has been seen and checked)
        bundle = tmp_path / "b.warm"
        bundle.write_bytes(source.read_bytes())
        proc = subprocess.Popen(
            [sys.executable, "-m", "warmcli", "clean", bundle, "--max-size", LIMIT],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=warm.env, cwd=ROOT,
        )  # fmt: skip
        while proc.poll() is None:
            left = _count(bundle)
            if left is not None and left < KERNELS:
                os.kill(proc.pid, signal.SIGINT)
                break
            time.sleep(0.002)
        out, err = proc.communicate(timeout=60)
        left = _count(bundle)
        assert left is not None and warm("verify", bundle, "-q").returncode == 0
        if proc.returncode != 130 or left == KERNELS:
            continue  # it ended first, or the signal came before the removal: not this case
        if "clean: removed" in out:
            continue  # the report was printed: it says what was removed
        seen += 1
        [line] = err.strip().splitlines()
        said = re.fullmatch(
            r"warm: interrupted: removed (\d+) kernel\(s\) and \d+ tune\(s\).*", line
        )
        assert said, line
        assert int(said.group(1)) == KERNELS - left, line
        assert "kept" in line, line
    assert seen, "SIGINT never landed after the removal"
