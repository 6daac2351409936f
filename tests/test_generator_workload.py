"""A workload written as a generator (`def workload(rt): ... yield`), or an async one, is
run to its end, as an `async def` workload is: calling it ran nothing, so `warm run` said
the workload "launched nothing", stored nothing and exited 0. The real CLI in a
subprocess, the host backend.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

HEAD = """\
import asyncio
import numpy as np
from warmcli import Kernel

DEVICE = "host"
K = Kernel("void inc(int *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")
"""
BODIES = {
    "generator": """
def workload(rt):
    for n in (4, 8):
        rt.launch(K, rt.upload(np.zeros(n, np.int32)), n)
        yield n
""",
    "async generator": """
async def workload(rt):
    for n in (4, 8):
        await asyncio.sleep(0)
        rt.launch(K, rt.upload(np.zeros(n, np.int32)), n)
        yield n
""",
}


@pytest.mark.parametrize("kind", BODIES)
def test_a_generator_workload_is_run_to_its_end(
    warm: Warm, workload_file, bundle_path: Path, kind: str
) -> None:
    script = workload_file(HEAD + BODIES[kind])
    proc = warm("run", script, "-b", bundle_path, "--quiet")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "stored 1 new kernel(s)" in proc.stdout, proc.stdout
    assert "launched nothing" not in proc.stdout and proc.stderr == "", proc.stderr
    proc = warm("verify", bundle_path, "--workload", script, "--quiet")
    assert proc.returncode == 0 and proc.stderr == "", proc.stdout + proc.stderr


def test_a_generator_workload_that_raises_is_named_at_its_line(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    script = workload_file(HEAD + BODIES["generator"].replace("yield n", "yield n\n    1 / 0"))
    proc = warm("run", script, "-b", bundle_path, "--quiet")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert f"{script}:" in line and "ZeroDivisionError" in line, line
