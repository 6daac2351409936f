"""A failed first `warm run` into a bundle whose name no UTF-8 spells: one line, exit 2,
and the empty bundle it created removed (its read-only check of what the bundle holds took
the name through `urllib.parse.quote`, which refuses such a name: a traceback, the bundle
and its lock file left). The real CLI in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import Warm


def test_a_failed_first_run_into_a_non_utf8_name_removes_what_it_made(
    warm: Warm, tmp_path: Path
) -> None:
    (tmp_path / "fails.py").write_text('def workload(rt):\n    raise RuntimeError("boom")\n')
    name = os.fsdecode(b"b\xff.warm")
    done = subprocess.run(
        [sys.executable, "-m", "warmcli", "run", "fails.py", "-b", name],
        capture_output=True,
        text=True,
        env=warm.env,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "boom" in done.stderr, done.stderr
    assert not (tmp_path / name).exists(), os.listdir(tmp_path)
