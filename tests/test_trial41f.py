"""A nightly job's bundle (trial41f): what a production write-back stores is as recently used
as what it was served, so `warm clean --max-size` does not evict a night's new kernels first."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

JOB = """
import os
from warmcli import Kernel

DEVICE = "host"
SRC = "void {n}(const float *a, float *o, int n) {{ for (int i=0;i<n;i++) o[i]=a[i]*SCALE; }}"
NAMES = os.environ["JOB_KERNELS"].split(",")
KERNELS = [Kernel(SRC.format(n=n), n, "PPi", defines={"SCALE": i + 2}) for i, n in enumerate(NAMES)]

def workload(rt):
    a = rt.upload(__import__("numpy").ones(64, dtype="float32"))
    for k in KERNELS:
        rt.launch(k, a, rt.buffer(64), 64)

if __name__ == "__main__":
    import warmcli
    workload(warmcli.runtime())
"""


def _env(tmp: Path, names: str, **extra: str) -> dict[str, str]:
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp),
        "LANG": "C",
        "PYTHONPATH": str(ROOT),
        "WARM_HOME": str(tmp / "home"),
        "JOB_KERNELS": names,
        **extra,
    }


def test_write_back_stores_its_kernels_as_used_when_it_touches_the_served(tmp_path: Path) -> None:
    job, bundle = tmp_path / "job.py", tmp_path / "b.warm"
    job.write_text(JOB)
    warm = [sys.executable, "-m", "warmcli", "run", "--quiet", "--bundle", str(bundle), str(job)]
    run = subprocess.run(warm, env=_env(tmp_path, "k0,k1"), capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    # The next night: one kernel more, compiled by the job itself and written back.
    env = _env(tmp_path, "k0,k1,k2", WARM_BUNDLE=str(bundle), WARM_BUNDLE_WRITE="1")
    prod = subprocess.run([sys.executable, str(job)], env=env, capture_output=True, text=True)
    assert prod.returncode == 0, prod.stderr
    with sqlite3.connect(bundle) as conn:
        used = dict(conn.execute("SELECT entry, last_used FROM kernels").fetchall())
    assert set(used) == {"k0", "k1", "k2"}
    assert used["k2"] == used["k0"] == used["k1"], used
