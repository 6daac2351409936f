"""Production trials of an adopting service, in real subprocesses with the system cc: threads
launching and tuning at once over a bundle (strict) compute bit for bit what a cold process
computes and print nothing; a tune asked of a runtime that `use_bundle` closed is not
called corrupt."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import Warm, scaled

SERVICE = (
    r"""
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
"""
    + scaled(4)
    + r"""def workload(rt):
    for i in range(4):
        one(rt, i, False)
"""
)

THREADS = """
import hashlib, sys, threading, warmcli, svc
warmcli.use_bundle(sys.argv[1] if sys.argv[1] != "-" else None)
rt = warmcli.runtime()
out = [b""] * 8
def work(i):
    out[i] = svc.one(rt, i % 4)
threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
print(hashlib.sha256(b"".join(out)).hexdigest())
"""

OLD_RUNTIME_TUNE = """
import sys, warmcli, svc
warmcli.use_bundle(sys.argv[1])
old = warmcli.runtime()
svc.one(old, 0)
warmcli.use_bundle(None)  # closes `old` and the bundle it served from
svc.one(old, 1)  # a tune in the bundle, which is closed now: tuned cold
"""


def _py(
    tmp_path: Path, warm: Warm, code: str, *args: str, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=dict(warm.env, PYTHONPATH=f"{tmp_path}:{warm.env.get('PYTHONPATH', '')}", **env),
        timeout=120,
    )


def test_threads_over_a_strict_bundle_compute_what_a_cold_process_does_silently(
    warm: Warm, tmp_path: Path, served: Path
) -> None:
    cold = _py(tmp_path, warm, THREADS, "-")
    hot = _py(tmp_path, warm, THREADS, str(served), WARM_STRICT="1")
    assert cold.returncode == 0 and hot.returncode == 0, cold.stderr + hot.stderr
    assert hot.stdout == cold.stdout and len(hot.stdout.strip()) == 64
    assert hot.stderr == "" and cold.stderr == ""


def test_a_tune_on_a_runtime_use_bundle_closed_is_not_called_corrupt(
    warm: Warm, tmp_path: Path, served: Path
) -> None:
    done = _py(tmp_path, warm, OLD_RUNTIME_TUNE, str(served), WARM_EXPLAIN="1")
    assert done.returncode == 0, done.stderr
    assert "corrupt" not in done.stderr, done.stderr
