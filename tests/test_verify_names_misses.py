"""The verify pass names each kernel and tune it missed, with the reason, in text and JSON.

Through the real CLI: a workload that drifts in the verify pass (another kernel's
defines, another shape) makes `warm run` and `warm verify --workload` exit 1 naming
each miss; a compile-only pre-build (`--arch sm_90`, real nvcc) explains its tune
misses too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.cuda.nvcc import find_nvcc
from warmcli.backends.toolchain import ToolchainError

DRIFT = """\
from warmcli import Kernel, Tunable

DEVICE = "{device}"
CALLS = [0]
SRC = {source!r}
OP = Tunable(
    "add",
    {{f"s{{s}}": Kernel(SRC, "add", "Pi", language="{language}", defines={{"STEP": s}})
     for s in (1, 2)}},
    lambda rt, k, x, n, stream=None: rt.launch(k, x, n, stream=stream),
)

def workload(rt):
    CALLS[0] += 1
    late = CALLS[0] >= FROM  # the verify pass drifts: another kernel, another shape
    n = 32 if late else 16
    x = rt.buffer(n)
    if KERNEL:
        rt.launch(Kernel(SRC, "add", "Pi", language="{language}",
                         defines={{"STEP": 7 if late else 3}}), x, n)
    rt.tune(OP, x, n)
"""
HOST = DRIFT.format(
    device="host",
    language="c",
    source="void add(float *x, int n) { for (int i = 0; i < n; i++) x[i] += STEP; }",
)
KERNEL_MISS = (
    "kernel add[STEP=7]: defines: bundle has STEP=1 | STEP=2 | STEP=3, this process wants STEP=7"
)
TUNE_MISS = (
    "tune add float32[32] 32: shape: bundle has float32[16] 16, this process wants float32[32] 32"
)


def test_run_and_verify_name_each_miss_and_its_reason(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    path = workload_file(HOST + "FROM = 3\nKERNEL = True\n", "drift.py")
    proc = warm("run", path, "--bundle", bundle_path, "--quiet")
    assert proc.returncode == 1
    assert f"miss: {KERNEL_MISS}" in proc.stdout and f"miss: {TUNE_MISS}" in proc.stdout
    doc = json.loads(warm("run", path, "--bundle", bundle_path, "--json").stdout)
    assert doc["verified"] is False
    assert [(m["kind"], m["label"], m["reason"]) for m in doc["explanations"]] == [
        ("kernel", "add[STEP=7]", "defines"),
        ("tune", "add float32[32] 32", "shape"),
    ]
    replay = workload_file(HOST + "FROM = 1\nKERNEL = True\n", "replay.py")
    proc = warm("verify", bundle_path, "--workload", replay)
    assert proc.returncode == 1
    assert f"miss: {KERNEL_MISS}" in proc.stdout and f"miss: {TUNE_MISS}" in proc.stdout
    proc = warm("verify", bundle_path, "--workload", replay, "--json")
    reasons = [(m["label"], m["reason"]) for m in json.loads(proc.stdout)["explanations"]]
    assert reasons == [("add[STEP=7]", "defines"), ("add float32[32] 32", "shape")]


@pytest.mark.nvcc
def test_a_compile_only_verify_explains_its_tune_misses(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    try:
        find_nvcc()
    except ToolchainError as exc:  # pragma: no cover - make install brings nvcc
        pytest.skip(f"nvcc not found: {exc}")
    source = (
        'extern "C" __global__ void add(float *x, int n) '
        "{ if (threadIdx.x < n) x[threadIdx.x] += STEP; }"
    )
    text = DRIFT.format(device="cuda", language="cuda", source=source)
    path = workload_file(text + "FROM = 3\nKERNEL = False\n", "cdrift.py")
    proc = warm("run", path, "--bundle", bundle_path, "--arch", "sm_90", "--json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["missing"] == ["sm_90: 1 tune(s) reached, not recorded in the bundle"]
    [miss] = doc["explanations"]
    assert (miss["kind"], miss["label"], miss["reason"]) == ("tune", "add float32[32] 32", "shape")
