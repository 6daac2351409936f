"""Review of `warm check --driver` and the fleet-driver lines (cuda30): what a stated
driver accepts, and how it is shown."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm


@pytest.mark.parametrize("driver", ["13.0\n", "١٣.٠", " 13.0"])
def test_a_driver_that_is_not_ascii_x_dot_y_is_refused_on_one_line(
    warm: Warm, tmp_path: Path, driver: str
) -> None:
    proc = warm("check", tmp_path / "none.warm", "--arch", "sm_90", "--driver", driver)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "--driver" in proc.stderr
