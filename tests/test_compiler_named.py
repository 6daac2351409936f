"""A compiler named by a relative path (`--nvcc ./nvcc`, `WARM_NVCC=./nvcc`) is that file,
not a name looked up on PATH (it said "compiler 'nvcc' not found", the `./` dropped), and
its version line is shown inert like any text warm did not write (its escape sequences
reached the terminal). The real CLI in a subprocess, a real fake nvcc script.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

FAKE = """#!/bin/sh
printf 'Cuda compilation tools, release 12.4, V12.4.99 \\033[31mRED\\033]8;;http://x\\007\\n'
"""


@pytest.mark.parametrize("how", ["--nvcc", "WARM_NVCC"])
def test_a_relative_nvcc_is_that_file_and_its_version_is_inert(
    warm: Warm, tmp_path: Path, how: str
) -> None:
    fake = tmp_path / "mynvcc"
    fake.write_text(FAKE)
    fake.chmod(0o755)
    args = ["devices", "--compiler", "nvcc"]
    if how == "--nvcc":
        proc = warm(*args, "--nvcc", "./mynvcc", cwd=tmp_path)
    else:
        proc = warm.with_env(WARM_NVCC="./mynvcc")(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [line] = [x for x in proc.stdout.splitlines() if x.startswith("compiler: cuda")]
    assert f"nvcc {os.path.realpath(fake)} (" in line, line
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout, repr(line)
    assert "\\x1b[31mRED" in line, line
