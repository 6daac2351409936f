"""A GPU-less pre-build by a CUDA newer than the GPU's driver (same major release), served
on that GPU by CUDA's minor version compatibility: `warm run` there compiles nothing and
a strict hot start computes a cold start's bits.

The bundles come from elsewhere, as in a fleet: `GPU_CHECK_PREBUILT` names a folder of
`examples/matmul_cuda.py` pre-builds for this GPU's arch (`scripts/gpu-check` sets it to
`.carry/prebuilt`, made on a CI machine by `warm run --arch sm_90 [--compiler nvcc]`).
Marked `gpu`: skipped without a CUDA device or without that folder.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm, gpu_arch_or_skip
from test_cuda_gpu_serving import serve

pytestmark = pytest.mark.gpu


def _prebuilt() -> list[Path]:
    folder = os.environ.get("GPU_CHECK_PREBUILT", "")
    return sorted(Path(folder).glob("*.warm")) if folder else []


def _release(text: str) -> tuple[int, int]:
    found = re.search(r"release (\d+)\.(\d+)", text)
    assert found is not None, text
    return int(found.group(1)), int(found.group(2))


@pytest.mark.parametrize("prebuilt", _prebuilt() or [None], ids=lambda p: p.name if p else "none")
def test_a_prebuild_by_a_newer_minor_release_is_served(
    warm: Warm, tmp_path: Path, prebuilt: Path | None
) -> None:
    arch = gpu_arch_or_skip()
    if prebuilt is None:
        pytest.skip("no pre-built bundles (GPU_CHECK_PREBUILT)")
    bundle = shutil.copy(prebuilt, tmp_path / prebuilt.name)
    stats = warm.json("stats", bundle)
    built = {_release(k["toolchain"]) for k in stats["kernels"] if k["arch"] == arch}
    devices = warm.json("devices")
    (gpu,) = [d for d in devices["devices"] if d["id"] == "cuda:0"]
    driver = tuple(int(x) for x in gpu["driver"].split("."))
    cold = serve(warm, None)
    doc = warm.json("run", EXAMPLES / "matmul_cuda.py", "--device", "cuda:0", "-b", bundle)
    why = f"built by CUDA {sorted(built)}, driver {driver}: {doc['passes']}"
    assert all(p["compilation"]["compiled"] == 0 for p in doc["passes"]), why
    hot = serve(warm, bundle, WARM_STRICT="1")
    assert hot["kernels"] == 0 and hot["tunes"] == 0, why
    assert (hot["c"], hot["out"]) == (cold["c"], cold["out"]), why
