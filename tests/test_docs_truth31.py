"""What warm says checked against what it does (docs31): README's commands run as written,
and where the code answered otherwise than a user would reasonably read it, the real CLI
here.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


def test_driver_without_arch_names_the_missing_arch(warm: Warm, tmp_path: Path) -> None:
    """README: `--driver` without `--arch`, or not `X.Y`, is an error. `warm check B
    --driver 13.0` said `--driver '13.0': give a CUDA release such as 13.0, with --arch`,
    asking for the very release given; it now says that `--arch` is what is missing."""
    proc = warm("check", tmp_path / "none.warm", "--driver", "13.0")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--arch" in lines[0], proc.stderr
    assert "such as 13.0" not in lines[0], proc.stderr


def test_driver_not_a_release_still_says_which_form(warm: Warm, tmp_path: Path) -> None:
    """A `--driver` that is no `X.Y` (with `--arch` given) is still named with the form
    it must take."""
    proc = warm("check", tmp_path / "none.warm", "--arch", "sm_90", "--driver", "13")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "'13'" in lines[0] and "13.0" in lines[0], proc.stderr
