"""Review of `warm check --driver` and the fleet-driver lines (cuda30): what a stated
driver accepts, and how it is shown. The real CLI, each command a fork of a process that
imported it once (`tests/forked_cli.py`); the example's NVRTC pre-build that two tests
read is made once for the module and copied to each."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, Warm, nvcc_or_skip, nvrtc_release_or_skip
from forked_cli import ForkedWarm, forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.cuda.nvrtc import find_nvrtc

MATMUL = EXAMPLES / "matmul_cuda.py"


@pytest.mark.parametrize("driver", ["13.0\n", "١٣.٠", " 13.0"])
def test_a_driver_that_is_not_ascii_x_dot_y_is_refused_on_one_line(
    warm: Warm, tmp_path: Path, driver: str
) -> None:
    proc = warm("check", tmp_path / "none.warm", "--arch", "sm_90", "--driver", driver)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "--driver" in proc.stderr


@pytest.fixture(scope="module")
def nvrtc_prebuilt(tmp_path_factory: pytest.TempPathFactory, forking_servers: Any) -> Path:
    """The CUDA example pre-built for sm_90 by NVRTC (`warm run --arch sm_90 --compiler nvrtc
    --jobs 2`), once for the module, by a warm forked as `warm` is: what each test copies."""
    if find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    folder = tmp_path_factory.mktemp("nvrtc-prebuilt")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = ForkedWarm(
        Warm(dict(env, WARM_HOME=str(folder / "home"), COLUMNS="200")), forking_servers
    )
    bundle = folder / "rtc.warm"
    proc = warm(
        "run", MATMUL, "--arch", "sm_90", "--compiler", "nvrtc", "--jobs", "2", "-b", bundle, "-q"
    )
    assert proc.returncode == 0, proc.stderr
    return bundle


def _nvrtc_prebuild(prebuilt: Path, tmp_path: Path) -> Path:
    """A copy of the module's NVRTC pre-build in `tmp_path` (as the run there makes it)."""
    bundle = tmp_path / "rtc.warm"
    shutil.copyfile(prebuilt, bundle)
    return bundle


def test_check_text_says_which_driver_it_answered_for(
    warm: Warm, tmp_path: Path, nvrtc_prebuilt: Path
) -> None:
    bundle = _nvrtc_prebuild(nvrtc_prebuilt, tmp_path)
    stated = warm("check", bundle, "--arch", "sm_90", "--driver", "13.0").stdout.splitlines()
    (line,) = [s for s in stated if s.startswith("here: sm_90")]
    assert "driver 13.0 (--driver)" in line
    plain = warm("check", bundle, "--arch", "sm_90").stdout.splitlines()
    assert not any("--driver" in s for s in plain if s.startswith("here:"))


def _kernel_refusals(warm: Warm, bundle: Path, driver: str) -> list[str]:
    proc = warm("check", bundle, "--arch", "sm_90", "--driver", driver, "--json")
    assert proc.returncode == 1, proc.stderr  # a GPU-less pre-build's tunes are pending
    doc = json.loads(proc.stdout)
    assert [d["driver"] for d in doc["devices"] if d["backend"] == "cuda"] == [driver]
    return [m["detail"] for m in doc["unservable"] if m["kind"] == "kernel"]


def test_a_stated_driver_judges_ptx_a_newer_gpu_would_jit(warm: Warm, tmp_path: Path) -> None:
    major, minor = nvrtc_release_or_skip(older_minor=True)
    bundle = tmp_path / "ptx.warm"
    args = ("--arch", "sm_80", "--ptx", "compute_80", "--compiler", "nvrtc", "-b", bundle, "-q")
    assert warm("run", MATMUL, *args).returncode == 0
    assert _kernel_refusals(warm, bundle, f"{major}.{minor}") == []  # on sm_90 by PTX JIT
    refused = _kernel_refusals(warm, bundle, f"{major}.0")
    assert refused and all(f"the driver supports CUDA {major}.0" in d for d in refused)


def test_a_stated_driver_finds_the_older_toolchains_build(
    warm: Warm, tmp_path: Path, nvrtc_prebuilt: Path
) -> None:
    nvcc_or_skip()
    rtc = _nvrtc_prebuild(nvrtc_prebuilt, tmp_path)
    cc, both = tmp_path / "cc.warm", tmp_path / "both.warm"
    args = ("--arch", "sm_90", "--compiler", "nvcc", "--jobs", "2", "-b", cc, "-q")
    assert warm("run", MATMUL, *args).returncode == 0
    assert warm("merge", rtc, cc, "-o", both).returncode == 0
    assert _kernel_refusals(warm, both, "13.0") == []
    assert _kernel_refusals(warm, rtc, "13.0") == []  # its cubins: minor version compatibility
    assert len(_kernel_refusals(warm, both, "12.8")) == len(_kernel_refusals(warm, rtc, "12.8")) > 0
