"""Trial 55: what the README promises, tried as a new user with workloads of its own, through
the real CLI in a subprocess (conftest's `warm`, each command a fork of a process that imported
the CLI once, `tests/forked_cli.py`). Each test here failed before its fix."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.cuda.nvrtc import find_nvrtc

HALVE = textwrap.dedent(
    '''
    import numpy as np
    from warmcli import Kernel

    DEVICE = "cuda"
    HALVE = Kernel(r"""
    extern "C" __global__ void halve(float *y, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] *= 0.5f;
    }""", "halve", "Pi", language="cuda")

    def workload(rt):
        y = rt.upload(np.ones(256, np.float32))
        rt.launch(HALVE, y, 256, grid=(1,), block=(256,))
    '''
)


def test_check_for_an_older_major_driver_names_the_cubins_fix_not_the_ptxs(
    warm: Warm, tmp_path: Path
) -> None:
    # README (Where a build is served): a pre-build by CUDA 13.5 checked for a 12.8 driver
    # says `pre-build with CUDA 12.x or older`: its cubin is what an sm_90 GPU takes, and
    # any 12.x cubin runs there. The PTX kept beside it (read first) needs 12.8 or older:
    # that reason was the one shown, asking for an older compiler than the fix needs.
    if find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    workload, bundle = tmp_path / "halve.py", tmp_path / "h.warm"
    workload.write_text(HALVE)
    made = warm("run", workload, "--arch", "sm_90", "--compiler", "nvrtc", "-b", bundle, "--quiet")
    assert made.returncode == 0, made.stderr
    proc = warm("check", bundle, "--arch", "sm_90", "--driver", "12.8", "--json")
    assert proc.returncode == 1, proc.stderr
    (refused,) = [m for m in json.loads(proc.stdout)["unservable"] if m["kind"] == "kernel"]
    assert refused["reason"] == "toolchain"
    assert "the driver supports CUDA 12.8: pre-build with CUDA 12.x or older" in refused["detail"]


@pytest.mark.parametrize("command", [["clean"], ["sign", "--key", "KEY"]])
def test_a_bundle_named_by_a_loop_of_links_is_said_so_not_missing(
    warm: Warm, tmp_path: Path, command: list[str]
) -> None:
    # `stats`, `verify`, `check`, `diff` and `merge` said `loop.warm: cannot read bundle: Too
    # many levels of symbolic links`; `clean` and `sign` asked `Path.exists()`, which answers
    # False for a loop, and said `no such bundle` of a path that is there.
    key = tmp_path / "ci.key"
    assert warm("keygen", key).returncode == 0
    loop = tmp_path / "loop.warm"
    loop.symlink_to(loop.name)
    args = [str(key) if a == "KEY" else a for a in command]
    proc = warm(command[0], loop, *args[1:])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().endswith("cannot read bundle: Too many levels of symbolic links")
    missing = warm(command[0], tmp_path / "none.warm", *args[1:])
    assert missing.returncode == 2 and missing.stderr.strip().endswith("none.warm: no such bundle")
