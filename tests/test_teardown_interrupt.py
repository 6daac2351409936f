"""Ctrl-C once a command has printed its result, while the interpreter tears down, ends
`warm` with the command's exit code, never killed by the signal: `warm merge` was seen to
exit by SIGINT (-2 to a parent) after printing "merged 2 bundle(s)". The real CLI in a
subprocess, SIGINT sent as the result's last line is read.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, Warm


def test_ctrl_c_after_the_result_never_kills_warm_by_the_signal(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    codes = []
    for i in range(6):
        proc = subprocess.Popen(
            [sys.executable, "-m", "warmcli", "merge", good, good, "-o", tmp_path / f"{i}.warm"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=warm.env, cwd=ROOT,
        )  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("  from "):  # the report's last line: the merge is done
                os.kill(proc.pid, signal.SIGINT)
                break
        proc.communicate(timeout=60)
        codes.append(proc.returncode)
        assert (tmp_path / f"{i}.warm").exists()
    assert all(code in (0, 130) for code in codes), codes
