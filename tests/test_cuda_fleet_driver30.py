"""A CUDA build for a driver older than its compiler: a cubin is served on any driver of its
major release (minor version compatibility), PTX only on one of its release; a refusal
names the fix. The real CLI, each command forked (`tests/forked_cli.py`); the example's
`--json` pre-build by each compiler is made once for the module, read by the test of its
`--json` and copied by the test of `check --driver`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, Warm, nvcc_or_skip, this_warms
from forked_cli import ForkedWarm

from warmcli.backends.cuda.nvrtc import find_nvrtc
from warmcli.backends.serving import Target, choose, why_not
from warmcli.records import KernelRecord

NVRTC_13_5 = this_warms("NVRTC release 13.5, V13.5.12")


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


def _cubin(toolchain: str) -> KernelRecord:
    return KernelRecord(
        "k", "cuda", "cuda", "sm_90", "matmul", "matmul", "s", "h", this_warms(toolchain)
    )  # fmt: skip


def test_refusal_for_an_older_major_release_names_the_fix_on_one_line() -> None:
    component, reason = why_not(
        _cubin(NVRTC_13_5), Target(backend="cuda", arch="sm_90", driver="12.8")
    ) or ("", "")
    assert component == "toolchain"
    assert reason.startswith("built by CUDA 13.5, the driver supports CUDA 12.8")
    assert "pre-build with CUDA 12.x or older" in reason and "--compiler nvcc" in reason
    assert "\n" not in reason


@pytest.mark.parametrize("driver", ["13.0", "13.5", "13.9", "14.0"])
def test_a_cubin_is_served_on_any_driver_of_its_major_release(driver: str) -> None:
    # CUDA's minor version compatibility: a cubin by 13.5 loads on a driver for 13.0
    assert why_not(_cubin(NVRTC_13_5), Target(backend="cuda", arch="sm_90", driver=driver)) is None


def test_ptx_needs_a_driver_as_new_as_its_compiler() -> None:
    ptx = KernelRecord("k", "cuda", "cuda", "compute_90", "matmul", "matmul", "s", "h", NVRTC_13_5)
    component, reason = why_not(ptx, Target(backend="cuda", arch="sm_90", driver="13.0")) or (
        "",
        "",
    )
    assert component == "toolchain" and "pre-build with CUDA 13.0 or older" in reason
    assert why_not(ptx, Target(backend="cuda", arch="sm_90", driver="13.5")) is None


def test_a_build_within_the_drivers_release_is_chosen_first() -> None:
    nvcc = "nvcc:Cuda compilation tools, release 13.0, V13.0.48"
    rtc, cc = _cubin(NVRTC_13_5), _cubin(nvcc)
    target = Target(backend="cuda", arch="sm_90", driver="13.0", toolchain=None)
    assert choose([rtc, cc], target, lambda _: True) is cc
    assert choose([cc, rtc], target, lambda _: True) is cc
    newer = Target(backend="cuda", arch="sm_90", driver="13.5", toolchain=None)
    assert choose([rtc, cc], newer, lambda _: True) is rtc  # both within: the first


MATMUL = EXAMPLES / "matmul_cuda.py"


def _prebuild(
    warm: Warm, tmp_path: Path, compiler: str, *more: str
) -> subprocess.CompletedProcess[str]:
    if compiler == "nvcc":
        nvcc_or_skip()
    elif find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    bundle = tmp_path / f"{compiler}.warm"
    return warm(
        "run", MATMUL, "--arch", "sm_90", "--compiler", compiler, "--jobs", "2", "-b", bundle, *more
    )


@pytest.fixture(scope="module")
def prebuilt(
    tmp_path_factory: pytest.TempPathFactory, forking_servers: Any
) -> Callable[[str], tuple[subprocess.CompletedProcess[str], Path]]:
    """`prebuilt(compiler)`: the CUDA example's `--json` pre-build by that compiler (as
    `_prebuild` runs it, forked as `warm` is) and its bundle, made once for the module: what
    the test of its `--json` reads, and what the test of `check --driver` copies."""
    folder = tmp_path_factory.mktemp("prebuilt30")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = ForkedWarm(
        Warm(dict(env, WARM_HOME=str(folder / "home"), COLUMNS="200")), forking_servers
    )
    made: dict[str, tuple[subprocess.CompletedProcess[str], Path]] = {}

    def get(compiler: str) -> tuple[subprocess.CompletedProcess[str], Path]:
        if compiler not in made:
            made[compiler] = (
                _prebuild(warm, folder, compiler, "--json"),
                folder / f"{compiler}.warm",
            )
        return made[compiler]

    return get


@pytest.mark.parametrize("compiler", ["nvrtc", "nvcc"])
def test_prebuild_json_names_the_driver_its_cuda_builds_need(
    prebuilt: Callable[[str], tuple[subprocess.CompletedProcess[str], Path]], compiler: str
) -> None:
    proc, _ = prebuilt(compiler)
    assert proc.returncode == 0, proc.stderr
    (info,) = json.loads(proc.stdout)["compilers"]
    release = re.search(r"release (\d+\.\d+)", info["version"])
    assert info["compiler"] == compiler and release is not None
    assert info["needs_driver"] == release.group(1).split(".")[0] + ".0"  # its major release
    assert info["ptx_needs_driver"] == release.group(1)  # a pre-build keeps PTX (`--ptx auto`)


def test_prebuild_says_which_driver_it_needs_on_one_line(warm: Warm, tmp_path: Path) -> None:
    proc = _prebuild(warm, tmp_path, "nvrtc", "--quiet")
    assert proc.returncode == 0, proc.stderr
    lines = [s for s in proc.stdout.splitlines() if "need a driver supporting CUDA >=" in s]
    assert len(lines) == 1 and "sm_90" in lines[0] and "nvrtc" in lines[0]
    assert "minor version compatibility" in lines[0] and "its PTX" in lines[0]


def test_host_run_names_no_driver(warm: Warm, tmp_path: Path) -> None:
    proc = warm(
        "run", EXAMPLES / "matmul_host.py", "--device", "host", "-b", tmp_path / "h.warm", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    compilers = json.loads(proc.stdout)["compilers"]
    assert all(c["needs_driver"] == c["ptx_needs_driver"] == "" for c in compilers)
    assert (
        "driver supporting"
        not in warm(
            "run", EXAMPLES / "matmul_host.py", "--device", "host", "-b", tmp_path / "h.warm"
        ).stdout
    )


def _kernel_refusals(warm: Warm, bundle: Path, *driver: str) -> list[dict]:
    proc = warm("check", bundle, "--arch", "sm_90", *driver, "--json")
    assert proc.returncode == 1, proc.stderr  # a GPU-less pre-build's tunes are pending
    return [m for m in json.loads(proc.stdout)["unservable"] if m["kind"] == "kernel"]


@pytest.mark.parametrize("compiler", ["nvrtc", "nvcc"])
def test_check_answers_for_a_stated_fleet_driver(
    warm: Warm,
    tmp_path: Path,
    compiler: str,
    prebuilt: Callable[[str], tuple[subprocess.CompletedProcess[str], Path]],
) -> None:
    proc, made = prebuilt(compiler)  # (the module's pre-build, as _prebuild makes it here)
    assert proc.returncode == 0, proc.stderr
    bundle = tmp_path / f"{compiler}.warm"
    shutil.copyfile(made, bundle)
    version = json.loads(warm("devices", "--compiler", compiler, "--json").stdout)
    cuda = next(c for c in version["compilers"] if c["device"] != "host")
    found = re.search(r"release (\d+\.\d+)", cuda["version"])
    assert found is not None
    release = found.group(1)
    assert _kernel_refusals(warm, bundle) == []  # no driver here: not judged
    assert _kernel_refusals(warm, bundle, "--driver", release) == []
    assert _kernel_refusals(warm, bundle, "--driver", cuda["needs_driver"]) == []  # its cubins
    older = f"{int(release.split('.')[0]) - 1}.9"
    refused = _kernel_refusals(warm, bundle, "--driver", older)
    assert len(refused) == 8 and all(m["reason"] == "toolchain" for m in refused)
    assert (
        f"built by CUDA {release}, the driver supports CUDA {older}: pre-build"
        in (refused[0]["detail"])
    )


@pytest.mark.parametrize("args", [["--arch", "sm_90", "--driver", "13"], ["--driver", "13.0"]])
def test_a_bad_or_driverless_driver_option_is_one_line(
    warm: Warm, tmp_path: Path, args: list[str]
) -> None:
    proc = warm("check", tmp_path / "none.warm", *args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "--driver" in proc.stderr
