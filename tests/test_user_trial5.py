"""What a new user, reading only the README, hit in round 5: a CI engineer, a fleet
operator and a library author.

Through the real CLI in a subprocess, on real files: a shard whose part of the workload
is empty is said to be so, not "the workload launched nothing" (and `--json`'s
`launched_nothing` stays false).
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Warm

INC_DBL = """\
import numpy as np
from warmcli import Kernel

DEVICE = "host"
INC = Kernel("void inc(int *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")

def workload(rt):
    rt.launch(INC, rt.upload(np.zeros(4, np.int32)), 4)
"""


def _empty_shard(warm: Warm, script: Path, tmp_path: Path) -> str:
    """The shard of two (0/2 or 1/2) that holds nothing of a one-kernel workload."""
    for i in (0, 1):
        proc = warm("run", script, "-b", tmp_path / f"s{i}.warm", "--shard", f"{i}/2", "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        if json.loads(proc.stdout)["stored"]["kernels"] == 0:
            return f"{i}/2"
    raise AssertionError("both shards stored the one kernel")


def test_an_empty_shard_is_said_to_be_empty_not_a_workload_that_launched_nothing(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    script = workload_file(INC_DBL)
    shard = _empty_shard(warm, script, tmp_path)
    warm.env["WARM_SHARD"] = shard
    proc = warm("run", script, "-b", tmp_path / "env.warm")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "launched nothing" not in proc.stdout, proc.stdout
    assert f"shard {shard}: nothing of this workload falls in this shard" in proc.stdout
    proc = warm("run", script, "-b", tmp_path / "env.warm", "--json")
    assert json.loads(proc.stdout)["launched_nothing"] is False
