"""What a machine gets wrong is said as the machine's fault, not the workload's: a C
compiler that is missing (`WARM_CC` naming none) stopped `warm run` with "workload raised
during CompileOnly: ...: ToolchainError: ...", as if the workload's code were broken; a
`--compile-timeout` of `nan` was refused as "less than or equal to 1000000"."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


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


AT_IMPORT = """import numpy as np, warmcli
from warmcli import Kernel
K = Kernel("void k(float *y, long n) { for (long i = 0; i < n; i++) y[i] *= 2; }", "k", "Pl")
rt = warmcli.runtime("host")
rt.launch(K, rt.upload(np.ones(4, np.float32)), 4)
def main(rt):
    pass
"""


def test_a_missing_c_compiler_at_the_workloads_import_is_the_machines_too(
    warm: Warm, tmp_path: Path
) -> None:
    (tmp_path / "w.py").write_text(AT_IMPORT)
    warm.env["WARM_CC"] = str(tmp_path / "no-cc")
    done = warm("run", tmp_path / "w.py", "-b", tmp_path / "b.warm")
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert line.startswith(f"warm: error: cc: compiler '{tmp_path / 'no-cc'}' not found"), line
    assert "ToolchainError" not in line and "failed to import" not in line, line
    assert f"{tmp_path / 'w.py'}:5" in line and "\n" not in line, line


@pytest.mark.parametrize("value", ["nan", "-nan", "NaN"])
def test_a_compile_timeout_that_is_no_number_is_said_so(
    warm: Warm, tmp_path: Path, value: str
) -> None:
    done = warm("run", EXAMPLES / "matmul_host.py", "-b", tmp_path / "b.warm",
                "--compile-timeout", value)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "not a number" in done.stderr, done.stderr
    assert "less than or equal" not in done.stderr, done.stderr
