"""What a README trial of the whole tool found (round 6), through the real CLI on real
files: a workload's forked child that returns from `workload()` ends there, never
running warm's passes a second time beside its parent.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm

FORKS = """\
import os, sys
import numpy as np
from warmcli import Kernel

DEVICE = "host"
INC = Kernel("void inc(int *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")
DBL = Kernel("void dbl(int *x, int n) { for (int i = 0; i < n; i++) x[i] *= 2; }", "dbl", "Pi")

def workload(rt):
    x = rt.upload(np.ones(4, np.int32))
    rt.launch(INC, x, 4)
    pid = os.fork()
    if pid == 0:
        rt.launch(DBL, x, 4)  # the child's own work: not seen, not stored
        {child}
    os.waitpid(pid, 0)
"""


def test_a_forked_child_that_returns_ends_there(warm: Warm, workload_file, tmp_path: Path) -> None:
    for child, name in (
        ("return", "ret"),
        ("raise ValueError('child')", "raise"),
        ("sys.exit(3)", "exit"),
    ):
        bundle = tmp_path / f"{name}.warm"
        proc = warm("run", workload_file(FORKS.replace("{child}", child)), "-b", bundle)
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        assert proc.stdout.count("stored 1 new kernel(s)") == 1, proc.stdout
        assert "Traceback" not in proc.stderr, proc.stderr
        listed = warm("stats", bundle)
        assert "inc" in listed.stdout and "dbl" not in listed.stdout, listed.stdout
