"""What a new user, reading only the README, hit with workloads of their own.

Through the real CLI in a subprocess, on real files: a workload that ends the process
itself (`os._exit`) leaves no `.lock` beside a bundle it never stored into.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm

EXITS_ITSELF = """\
import os
from warmcli import Kernel

DEVICE = "host"
K = Kernel("void inc(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")

def workload(rt):
    rt.launch(K, rt.buffer(4), 4)
    os._exit(0)
"""

PLAIN = EXITS_ITSELF.replace("    os._exit(0)\n", "").replace("import os\n", "")


def test_a_first_run_ended_by_os_exit_leaves_no_lock_behind(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    proc = warm("run", workload_file(EXITS_ITSELF), "-b", bundle_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert not bundle_path.exists()
    assert list(bundle_path.parent.glob("*.lock")) == []
