"""What a new user, reading only the README, hit with workloads of their own.

Through the real CLI in a subprocess, on real files: a workload that ends the process
itself (`os._exit`) leaves no `.lock` beside a bundle it never stored into, and under
`warm verify --workload` it is one line and exit 2, not a silent exit 0.
"""

from __future__ import annotations

import json
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


def test_verify_replaying_a_workload_that_ends_the_process_is_an_error(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    assert warm("run", workload_file(PLAIN, "plain.py"), "-b", bundle_path).returncode == 0
    script = workload_file(EXITS_ITSELF)
    proc = warm("verify", bundle_path, "--workload", script)
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stderr == (
        "warm: error: the workload ended the process itself (exit status 0, e.g. os._exit) "
        "during Verify (Execute)\n"
    )
    proc = warm("verify", bundle_path, "--workload", script, "--json")
    assert proc.returncode == 2
    doc = json.loads(proc.stdout)
    assert doc["exit"] == 2 and "ended the process itself" in doc["error"]
    # The replay of a sound workload still verifies, in text and JSON.
    proc = warm("verify", bundle_path, "--workload", workload_file(PLAIN, "plain.py"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "the bundle is complete" in proc.stdout
    doc = warm.json("verify", bundle_path, "--workload", workload_file(PLAIN, "plain.py"))
    assert doc["verified"] is True and doc["missing"] == []
