"""What a new user meets running README.md's commands as written: the help each command
prints. Every test runs the real CLI in a subprocess (the `warm` fixture).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

COMMANDS = ("run", "stats", "verify", "check", "merge", "push", "pull", "sign", "keygen")
COMMANDS += ("diff", "clean", "devices")


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_defaults_without_markup_escapes(warm: Warm, command: str) -> None:
    """Help is plain text: `[default: ...]` reads as written, never `\\[default: ...]`."""
    proc = warm(command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "\\[" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_a_cuda_device_on_a_machine_without_one_hints_at_arch(
    warm: Warm, tmp_path: Path, device: str
) -> None:
    """README: a CUDA workload on a machine with no GPU is refused with the hint to
    compile for `--arch sm_90`; `cuda:0` as much as `cuda`."""
    from warmcli.backends.opening import cuda_available

    if cuda_available():
        pytest.skip("a GPU is here")
    proc = warm("run", EXAMPLES / "saxpy_cuda.py", "--device", device, "-b", tmp_path / "x.warm")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--arch sm_90" in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


RECORD_UPLOAD = """
import numpy as np

def workload(rt):
    rt.upload(np.zeros(2, [("a", "i4"), ("b", "f4")]))
"""


def test_a_record_buffer_is_refused_naming_its_fields(warm: Warm, tmp_path: Path) -> None:
    """README: `rt.upload` refuses a record dtype with a `ValueError` naming it: its fields,
    not numpy's `void64`."""
    (tmp_path / "record.py").write_text(RECORD_UPLOAD)
    proc = warm("run", tmp_path / "record.py", "-b", tmp_path / "r.warm")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "record [('a', '<i4'), ('b', '<f4')] is not numeric" in proc.stderr, proc.stderr
    assert "void" not in proc.stderr and "Traceback" not in proc.stderr
