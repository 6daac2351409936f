"""`--compile-timeout inf` (or any value past what a wait can take) is refused as bad input
in one line naming the option: it was `OverflowError: cannot convert float infinity to
integer`, blamed on the workload's line. The real CLI in a subprocess.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


@pytest.mark.parametrize("value", ["inf", "1e309", "1e12"])
def test_a_compile_timeout_past_the_bound_is_refused(
    warm: Warm, bundle_path: Path, value: str
) -> None:
    proc = warm("run", EXAMPLES / "matmul_host.py", "-b", bundle_path, "--compile-timeout", value)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert "Invalid value for '--compile-timeout'" in line, line
    assert "workload" not in line and "Overflow" not in line, line
    assert not bundle_path.exists()
