"""Small wrongs mended on main in stop 40, each through the real CLI (a forked `warm`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

WORKLOAD = """
import numpy as np
from warmcli import Kernel

K = Kernel("void k(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "k", "Pi")

def workload(rt):
    x = np.zeros(4, dtype=np.float32)
    rt.launch(K, x, 4)
"""


@pytest.mark.parametrize("spec", ["cuda:\u00b2", "cuda:\u0669", "cuda:\uff11"])
def test_a_device_number_of_non_ascii_digits_is_refused_in_one_line(warm, tmp_path: Path, spec):
    """`"²".isdigit()` holds but `int("²")` raises: `--device cuda:²` was taken for an
    index (on a GPU machine, a ValueError traceback); it is no CUDA device's name."""
    (tmp_path / "w.py").write_text(WORKLOAD)
    result = warm(
        "run", str(tmp_path / "w.py"), "--device", spec, "--bundle", str(tmp_path / "b.warm")
    )
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a CUDA device" in lines[0], result.stderr
    assert "Traceback" not in result.stderr
