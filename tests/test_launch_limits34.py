"""A CUDA launch's sizes that no GPU takes fail the GPU-less pre-build, as they would fail
production's first launch: more than 1,024 threads a block (`block=(2048, 1, 1)`), a
block's z over 64, a grid's y or z over 65,535, its x over 2**31 - 1 passed `warm run
--arch sm_90` (exit 0, a bundle written) and only a GPU refused them."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm, nvcc_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

WORKLOAD = """
import numpy as np
from warmcli import Kernel
K = Kernel('extern "C" __global__ void k(float *y) {{ y[threadIdx.x] = 1.0f; }}', "k", "P",
           language="cuda")
def workload(rt):
    y = rt.buffer(4096)
    rt.launch(K, y, grid={grid}, block={block})
"""


@pytest.mark.parametrize(
    ("grid", "block", "said"),
    [
        ((1, 1, 1), (2048, 1, 1), "2048 threads"),
        ((1, 1, 1), (32, 32, 2), "2048 threads"),
        ((1, 1, 1), (1, 1, 65), "block z"),
        ((1, 65536, 1), (32, 1, 1), "grid y"),
        ((2**31, 1, 1), (32, 1, 1), "grid x"),
    ],
)
def test_a_launch_size_no_gpu_takes_fails_the_prebuild(
    warm: Warm, tmp_path: Path, grid: tuple[int, ...], block: tuple[int, ...], said: str
) -> None:
    nvcc_or_skip()
    (tmp_path / "w.py").write_text(WORKLOAD.format(grid=grid, block=block))
    done = warm("run", tmp_path / "w.py", "--arch", "sm_90", "-b", tmp_path / "b.warm")
    assert done.returncode == 2, done.stdout[-1000:] + done.stderr[-1000:]
    assert said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_the_largest_sizes_a_gpu_takes_pass(warm: Warm, tmp_path: Path) -> None:
    nvcc_or_skip()
    (tmp_path / "w.py").write_text(WORKLOAD.format(grid=(2**31 - 1, 65535, 65535),
                                                   block=(1024, 1, 1)))  # fmt: skip
    done = warm("run", tmp_path / "w.py", "--arch", "sm_90", "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 0, done.stderr[-2000:]
