"""README claims checked for real (round 29): the `warm stats` header lists devices with
their archs as numbers sort (`sm_75` before `sm_100`), as its tables do."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOST_WORKLOAD = """
from warmcli import Kernel
K = Kernel("void k(int *o){o[0]=1;}", "k", "P")
def workload(rt):
    rt.launch(K, rt.buffer(1, "int32"))
"""


def warm(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "warmcli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def test_stats_header_lists_devices_as_numbers_sort(tmp_path: Path) -> None:
    """A bundle written for sm_100 and sm_75 listed its device lines in text order
    (sm_100 first) above tables that put sm_75 first."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    import os
    import sqlite3

    env = {**os.environ, "WARM_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    workload = tmp_path / "w.py"
    workload.write_text(HOST_WORKLOAD)
    bundle = tmp_path / "b.warm"
    assert warm("run", str(workload), "-b", str(bundle), env=env).returncode == 0
    with sqlite3.connect(bundle) as db:  # two more device rows, as arch builds write them
        for arch in ("sm_100", "sm_75"):
            db.execute(
                "INSERT INTO fingerprints (identity, kind, data) VALUES (?, 'device', '{}')",
                (f"device:cuda|compile-only|{arch}|none",),
            )
    text = warm("stats", str(bundle), env=env)
    assert text.returncode == 0, text.stderr
    shown = [ln.split()[-1] for ln in text.stdout.splitlines() if ln.startswith("device ")]
    cuda = [d for d in shown if d.startswith("cuda")]
    assert cuda == ["cuda|compile-only|sm_75|none", "cuda|compile-only|sm_100|none"], shown
    doc = json.loads(warm("stats", str(bundle), "--json", env=env).stdout)
    listed = [f["identity"] for f in doc["fingerprints"] if "cuda" in str(f["identity"])]
    assert [i.split("|")[2] for i in listed] == ["sm_75", "sm_100"], listed
