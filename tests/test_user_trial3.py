"""What a new user, reading only the README, hit in round 3 with workloads of their own.

Through the real CLI in a subprocess, on real files: a workload that asks for
`warmcli.runtime()` itself (a second runtime, as production code does) has what it
launches there stored by `warm run`, so `warm verify --workload` and production agree
with the verify pass that the bundle is complete.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm

TWO_RUNTIMES = """\
import numpy as np
import warmcli
from warmcli import Kernel

DEVICE = "host"
INC = Kernel("void inc(int *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")
DBL = Kernel("void dbl(int *x, int n) { for (int i = 0; i < n; i++) x[i] *= 2; }", "dbl", "Pi")

def workload(rt):
    other = warmcli.runtime("host")
    x = rt.upload(np.ones(4, np.int32))
    rt.launch(INC, x, 4)
    other.launch(DBL, other.upload(np.ones(4, np.int32)), 4)
"""


def test_what_a_workload_launches_on_warmcli_runtime_is_stored(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    script = workload_file(TWO_RUNTIMES)
    proc = warm("run", script, "-b", bundle_path, "--quiet")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "stored 2 new kernel(s)" in proc.stdout
    proc = warm("verify", bundle_path, "--workload", script, "--quiet")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
