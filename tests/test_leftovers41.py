"""Wrongs left at stop 40, each now right: `warm check --json` names the device each entry was
judged for. The real CLI in a subprocess, real SQLite files, NVRTC or nvcc for a named arch.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import EXAMPLES, Warm, nvrtc_release_or_skip


def test_check_json_names_the_device_each_entry_was_judged_for(warm: Warm, tmp_path: Path) -> None:
    nvrtc_release_or_skip()
    path = tmp_path / "sm80.warm"
    run = warm("run", EXAMPLES / "saxpy_cuda.py", "--arch", "sm_80", "-b", path, "--no-verify")
    assert run.returncode == 0, run.stdout + run.stderr
    proc = warm("check", path, "--arch", "sm_75", "--arch", "sm_90", "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    ids = {d["id"] for d in doc["devices"]}
    assert {"sm_75", "sm_90"} <= ids, doc["devices"]
    # sm_75 has no build of any kernel (sm_80 cubins, compute_80 PTX): its own misses
    kernels = [m for m in doc["unservable"] if m["kind"] == "kernel"]
    assert kernels and {m["device"] for m in kernels} == {"sm_75"}, kernels
    # sm_90 JITs the compute_80 PTX: listed as its own
    assert doc["ptx_jit"] and {m["device"] for m in doc["ptx_jit"]} == {"sm_90"}, doc["ptx_jit"]
    # every tune is judged (and missed) on both, once each
    tunes = [m for m in doc["unservable"] if m["kind"] == "tune"]
    assert {m["device"] for m in tunes} == {"sm_75", "sm_90"}, tunes
    assert len(tunes) == 2 * doc["tunes"], tunes
