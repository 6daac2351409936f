"""Production trials, continued (real subprocesses, the system cc): a runtime `use_bundle`
closed runs a kernel its bundle lacks cold, neither explained as corrupt nor refused by
strict mode (as its tunes)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm
from test_production_trial30 import SERVICE, _py


@pytest.fixture
def served(warm: Warm, tmp_path: Path) -> Path:
    """`svc.py` (trial 30's service) in `tmp_path`, warmed into the bundle returned."""
    (tmp_path / "svc.py").write_text(SERVICE)
    bundle = tmp_path / "b.warm"
    done = warm("run", tmp_path / "svc.py", "--bundle", bundle)
    assert done.returncode == 0, done.stderr
    return bundle


OLD_RUNTIME_KERNEL = """
import sys, numpy as np, warmcli, svc
from warmcli import Kernel
warmcli.use_bundle(sys.argv[1], strict=True)
old = warmcli.runtime()
svc.one(old, 0)
warmcli.use_bundle(None, strict=True)  # closes `old` and the bundle it served from
y = old.buffer(1, "float32")
old.launch(Kernel("void z(float *y) { y[0] = 7; }", "z", "P", name="z"), y)
print(old.read(y)[0])
"""


def test_a_kernel_on_a_runtime_use_bundle_closed_runs_cold_unrefused(
    warm: Warm, tmp_path: Path, served: Path
) -> None:
    done = _py(tmp_path, warm, OLD_RUNTIME_KERNEL, str(served), WARM_EXPLAIN="1")
    assert done.returncode == 0 and done.stdout == "7.0\n", done.stderr
    assert "corrupt" not in done.stderr, done.stderr
