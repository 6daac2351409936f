"""scripts/gpu-check and scripts/fetch-gpu-carry, where they can run without a GPU: both
parse, and gpu-check stops at once with one line naming what is missing (here, the
carried wheels), leaving its log in OUT and nothing in the user's home."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

SCRIPTS = [ROOT / "scripts" / "gpu-check", ROOT / "scripts" / "fetch-gpu-carry"]


def test_the_scripts_parse() -> None:
    for script in SCRIPTS:
        proc = subprocess.run(["bash", "-n", script], capture_output=True, text=True)
        assert proc.returncode == 0, (script, proc.stderr)


def test_gpu_check_names_missing_wheels_and_stops(tmp_path: Path) -> None:
    home, out = tmp_path / "home", tmp_path / "out"
    home.mkdir()
    env = dict(
        os.environ,
        HOME=str(home),
        OUT=str(out),
        GPU_WORK=str(tmp_path / "work"),
        WHEELS=str(tmp_path / "no-wheels"),
        PYTHON=sys.executable,
    )
    proc = subprocess.run(
        ["bash", ROOT / "scripts" / "gpu-check"], capture_output=True, text=True, env=env,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 1
    last = proc.stdout.strip().splitlines()[-1]
    wanted = f"{tmp_path / 'no-wheels'} is missing: run scripts/fetch-gpu-carry and carry .carry"
    assert last == f"gpu-check: {wanted}"
    assert last in (out / "gpu-check.log").read_text()
    assert list(home.iterdir()) == []
