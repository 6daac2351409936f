"""What a machine gets wrong is said as the machine's fault, not the workload's: a C
compiler that is missing (`WARM_CC` naming none) stopped `warm run` with "workload raised
during CompileOnly: ...: ToolchainError: ...", as if the workload's code were broken; a
`--compile-timeout` of `nan` was refused as "less than or equal to 1000000"."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm


@pytest.mark.parametrize("cc", ["/nonexistent/cc", "no-such-cc-34"])
def test_a_missing_c_compiler_is_named_as_the_machines_not_the_workloads(
    warm: Warm, tmp_path: Path, cc: str
) -> None:
    warm.env["WARM_CC"] = cc
    done = warm("run", EXAMPLES / "matmul_host.py", "-b", tmp_path / "b.warm")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    line = lines[0]
    assert line.startswith(f"warm: error: cc: compiler '{cc}' not found"), line
    assert "workload raised" not in line and "ToolchainError" not in line, line
    assert "WARM_CC" in line, line  # what to set
    assert f"{EXAMPLES / 'matmul_host.py'}:" in line, line  # where it was needed
    assert not (tmp_path / "b.warm").exists()


@pytest.mark.parametrize("value", ["nan", "-nan", "NaN"])
def test_a_compile_timeout_that_is_no_number_is_said_so(
    warm: Warm, tmp_path: Path, value: str
) -> None:
    done = warm("run", EXAMPLES / "matmul_host.py", "-b", tmp_path / "b.warm",
                "--compile-timeout", value)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "not a number" in done.stderr, done.stderr
    assert "less than or equal" not in done.stderr, done.stderr
