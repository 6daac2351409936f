"""`warm check`, the real CLI in a subprocess, over bundles built for real here.

A foreign architecture on the host is written by `ForeignArch` (a test double of the
architecture label only, see test_explain); on CUDA, by a real GPU-less `--arch sm_80`
pre-build with nvcc, checked for sm_90.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import pytest
from conftest import Warm
from test_explain import ForeignArch, fake_cc, warm_into

from warmcli.host import HostDevice
from warmcli.toolchain import ToolchainError

TWICE = """
from warmcli import Kernel

DEVICE = "cuda"
TWICE = Kernel(
    'extern "C" __global__ void twice(float *x, int n) '
    '{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= 2.0f; }',
    "twice", "Pi", language="cuda",
)

def workload(rt):
    x = rt.buffer(256)
    rt.launch(TWICE, x, 256, grid=1, block=256)
"""


def test_a_bundle_built_here_is_servable_here(warm: Warm, tmp_path: Path) -> None:
    path = warm_into(tmp_path / "here.warm", HostDevice())
    proc = warm("check", path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 kernel(s), 1 tune(s): every entry is servable here" in proc.stdout
    doc = warm.json("check", path)
    assert doc["servable"] is True and doc["unservable"] == []
    assert doc["devices"][0]["arch"] == platform.machine()


def test_a_foreign_architecture_is_reported(warm: Warm, tmp_path: Path) -> None:
    device = ForeignArch()
    path = warm_into(tmp_path / "foreign.warm", device)
    proc = warm("check", path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "4 not servable here" in proc.stdout
    assert "architecture" in proc.stdout and device.arch in proc.stdout
    doc = warm("check", path, "--json")
    assert doc.returncode == 1
    unservable = json.loads(doc.stdout)["unservable"]
    kernels = [m for m in unservable if m["kind"] == "kernel"]
    assert {m["reason"] for m in kernels} == {"arch"} and len(kernels) == 3
    assert (
        kernels[0]["detail"] == f"bundle has {device.arch}, this machine has {platform.machine()}"
    )
    (tune,) = [m for m in unservable if m["kind"] == "tune"]
    assert tune["reason"] == "device" and tune["detail"].startswith("arch: bundle has")


def test_a_foreign_toolchain_is_reported(warm: Warm, tmp_path: Path) -> None:
    path = warm_into(tmp_path / "cc.warm", HostDevice(str(fake_cc(tmp_path))))
    proc = warm("check", path, "--json")
    assert proc.returncode == 1
    doc = json.loads(proc.stdout)
    assert {m["reason"] for m in doc["unservable"]} == {"toolchain"}
    assert all("(warm test wrapper) 99.1" in m["detail"] for m in doc["unservable"])


def test_a_missing_bundle_is_one_line_and_exit_2(warm: Warm, tmp_path: Path) -> None:
    proc = warm("check", tmp_path / "nothing.warm")
    assert proc.returncode == 2
    assert proc.stderr.startswith("warm: error: ") and "Traceback" not in proc.stderr


def test_an_sm_80_prebuild_is_not_servable_on_sm_90(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    from warmcli.cuda.nvcc import find_nvcc

    try:
        find_nvcc()
    except ToolchainError as exc:
        pytest.skip(f"nvcc not found: {exc}")
    path = tmp_path / "sm80.warm"
    # Cubins only: with its PTX kept (the default) sm_90 would be served by PTX JIT.
    run = warm(
        "run", workload_file(TWICE), "--arch", "sm_80", "--bundle", path, "--no-verify", "--no-ptx"
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert warm("check", path, "--arch", "sm_80").returncode == 0
    proc = warm("check", path, "--arch", "sm_90")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (miss,) = json.loads(warm("check", path, "--arch", "sm_90", "--json").stdout)["unservable"]
    assert (miss["kind"], miss["label"], miss["reason"]) == ("kernel", "twice", "arch")
    assert miss["detail"] == "bundle has sm_80, this machine has sm_90"
