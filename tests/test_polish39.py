"""Five small things today's reviews left (polish39).

Real parts only: the CLI in subprocesses, the system cc, NVRTC for `--arch sm_90` (no
GPU), real SQLite files; driver processes that land a signal with `sys.settrace`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm, nvrtc_release_or_skip


@pytest.fixture(scope="module")
def cuda_only(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The CUDA example warmed for sm_90 without a GPU (compile-only, NVRTC), made once."""
    nvrtc_release_or_skip()
    folder = tmp_path_factory.mktemp("cuda_p39")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = Warm(dict(env, WARM_HOME=str(folder / "home")))
    bundle = folder / "cuda.warm"
    done = warm("run", EXAMPLES / "saxpy_cuda.py", "--arch", "sm_90", "-b", bundle, "-q")
    assert done.returncode == 0, done.stdout[-800:] + done.stderr[-800:]
    return bundle


def test_check_of_a_cuda_only_bundle_without_a_gpu_claims_no_pass(
    warm: Warm, cuda_only: Path
) -> None:
    """`warm check cuda.warm` (only `--arch sm_90` kernels) with no GPU and no `--arch`
    said "every entry checked is servable here" (exit 0, `servable: true`), though it
    checked nothing. It says nothing could be checked here and how to check it; exit 0
    (README: entries with no device here never fail), `--json`'s `servable` null."""
    done = warm("check", cuda_only)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "servable here" not in done.stdout, done.stdout
    assert "nothing could be checked here" in done.stdout, done.stdout
    assert "--arch sm_XX" in done.stdout, done.stdout
    doc = json.loads(warm("check", cuda_only, "--json").stdout)
    assert doc["servable"] is None and doc["checked"] == {"kernels": 0, "tunes": 0}, doc
    assert doc["not_checked"] == {"cuda": {"kernels": 8, "tunes": 6}}, doc
    armed = json.loads(warm("check", cuda_only, "--arch", "sm_90", "--json").stdout)
    assert armed["servable"] is False and armed["checked"] == {"kernels": 8, "tunes": 6}
