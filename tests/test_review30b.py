"""Review of `warm check --driver` and the fleet-driver lines (cuda30): what a stated
driver accepts, and how it is shown."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm

from warmcli.backends.cuda.nvrtc import find_nvrtc

MATMUL = EXAMPLES / "matmul_cuda.py"


@pytest.mark.parametrize("driver", ["13.0\n", "١٣.٠", " 13.0"])
def test_a_driver_that_is_not_ascii_x_dot_y_is_refused_on_one_line(
    warm: Warm, tmp_path: Path, driver: str
) -> None:
    proc = warm("check", tmp_path / "none.warm", "--arch", "sm_90", "--driver", driver)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "--driver" in proc.stderr


def _nvrtc_prebuild(warm: Warm, tmp_path: Path) -> Path:
    if find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    bundle = tmp_path / "rtc.warm"
    proc = warm(
        "run", MATMUL, "--arch", "sm_90", "--compiler", "nvrtc", "--jobs", "2", "-b", bundle, "-q"
    )
    assert proc.returncode == 0, proc.stderr
    return bundle


def test_check_text_says_which_driver_it_answered_for(warm: Warm, tmp_path: Path) -> None:
    bundle = _nvrtc_prebuild(warm, tmp_path)
    stated = warm("check", bundle, "--arch", "sm_90", "--driver", "13.0").stdout.splitlines()
    (line,) = [s for s in stated if s.startswith("here: sm_90")]
    assert "driver 13.0 (--driver)" in line
    plain = warm("check", bundle, "--arch", "sm_90").stdout.splitlines()
    assert not any("--driver" in s for s in plain if s.startswith("here:"))
