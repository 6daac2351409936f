"""Stop 38's hostile bundles and environments against the day's new code: a tune's recorded
pick build judged by `serving.why_not` (`BundleLookup.measured_otherwise`, `warm check`),
toolchain identities naming `COMPILER_PATH`/`GCC_EXEC_PREFIX`, escaped invisible characters.
What broke is kept here: each command exits 0 or says one line and exits non-zero, prints no
escape byte, and production computes the numbers a cold start computes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import Warm
from test_fuzz34 import MATMUL, SERVE

ROOT = Path(__file__).resolve().parents[1]


def test_a_long_compiler_path_is_a_toolchain_warm_reads_back(warm: Warm, tmp_path: Path) -> None:
    """`COMPILER_PATH` (and `GCC_EXEC_PREFIX`) name cc's programs in its toolchain identity,
    whole: one of 5,000 characters made an identity over the 4,096 characters a bundle's
    toolchain holds, so `warm run` stored six kernels it then refused as corrupt (`toolchain:
    5162 characters, over the limit`), exited 1, and production compiled them all. A long
    value is named by its length and digest now: the run is complete, production compiles
    nothing."""
    folder = tmp_path / ("p" * 5000)
    env = dict(warm.env, COMPILER_PATH=str(folder))
    run = Warm(env)("run", MATMUL, "-b", tmp_path / "long.warm")
    assert run.returncode == 0, run.stdout[-800:] + run.stderr[-800:]
    assert "corrupt" not in run.stdout + run.stderr
    served = dict(env, WARM_BUNDLE=str(tmp_path / "long.warm"), WARM_REPORT="1")
    proc = subprocess.run(
        [sys.executable, "-c", SERVE], capture_output=True, text=True, env=served, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-800:]
    assert "served everything: compiled 0 kernels, tuned 0 operations" in proc.stderr, proc.stderr
