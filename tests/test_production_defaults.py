"""Production defaults and reports, each through a real production subprocess: the
default bundle `warm run` writes is loaded without configuration, strict mode without a
bundle refuses, and the exit report says what really happened."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import EXAMPLES, ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

MATMUL = EXAMPLES / "matmul_host.py"
SERVE = """
import os, runpy, sys, warmcli
if len(sys.argv) > 1:  # a bundle to write back into, whose write lock cannot be taken
    warmcli.use_bundle(sys.argv[1], write=True)
    lock = sys.argv[1] + ".lock"
    if os.path.exists(lock):
        os.remove(lock)
    os.mkdir(lock)
example = runpy.run_path({example!r})
example["workload"](warmcli.runtime("host"))
"""


def serve(warm: Warm, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SERVE.format(example=str(MATMUL)), *args],
        env={**warm.env, "WARM_REPORT": "1", **env},
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )


def test_the_default_bundle_is_served_with_only_warm_home(warm: Warm) -> None:
    run = warm("run", MATMUL)
    assert run.returncode == 0, run.stdout + run.stderr
    hot = serve(warm)
    assert hot.returncode == 0, hot.stderr
    assert "bundle.warm served everything: compiled 0 kernels, tuned 0 operations" in hot.stderr
    off = serve(warm, WARM_BUNDLE="")  # set and empty: no bundle
    assert off.returncode == 0, off.stderr
    assert "warm: no bundle is loaded: this process compiled " in off.stderr
    assert "no bundle lacked" not in off.stderr


def test_strict_without_a_bundle_refuses_the_first_compile(warm: Warm) -> None:
    proc = serve(warm, WARM_STRICT="1")
    assert proc.returncode == 1
    assert "StrictMissError" in proc.stderr and "no bundle is loaded" in proc.stderr


def test_a_failed_write_back_is_reported_as_not_written(warm: Warm, tmp_path: Path) -> None:
    path = tmp_path / "writes.warm"
    proc = serve(warm, str(path))
    assert proc.returncode == 0, proc.stderr
    assert "NOT written back:" in proc.stderr and "cannot take the write lock" in proc.stderr
    assert "written back into it" not in proc.stderr


def test_a_broken_default_bundle_costs_a_cold_start_unless_strict(warm: Warm) -> None:
    home = Path(warm.env["WARM_HOME"])
    home.mkdir(parents=True, exist_ok=True)
    (home / "bundle.warm").write_bytes(b"not a bundle")
    cold = serve(warm)
    assert cold.returncode == 0, cold.stderr
    assert "warm: default bundle not loaded:" in cold.stderr
    assert "warm: no bundle is loaded: this process compiled " in cold.stderr
    strict = serve(warm, WARM_STRICT="1")
    assert strict.returncode == 1 and "BundleError" in strict.stderr
    named = serve(warm, WARM_BUNDLE=str(home / "bundle.warm"))  # asked for: fails fast
    assert named.returncode == 1 and "BundleError" in named.stderr
    assert (home / "bundle.warm").read_bytes() == b"not a bundle"
