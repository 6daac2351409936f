"""A GPU-less pre-build by a CUDA newer than the GPU's driver (same major release), served
on that GPU by CUDA's minor version compatibility: a strict production process there
compiles nothing and computes a cold start's bits.

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

pytestmark = pytest.mark.gpu


def _prebuilt() -> list[Path]:
    folder = os.environ.get("GPU_CHECK_PREBUILT", "")
    return sorted(Path(folder).glob("*.warm")) if folder else []


# A production process that launches the example's plain kernels (its tune is pending in
# a GPU-less pre-build): digests of what it read back, and what it compiled.
SERVE_KERNELS = """
import hashlib, json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import warmcli, matmul_cuda as mc

rt = warmcli.runtime("cuda")
rng = np.random.default_rng(2)
m, n = 300, 200
C = rng.standard_normal((m, n), dtype=np.float32)
bias = rng.standard_normal(n, dtype=np.float32)
c, bb, out = rt.upload(C), rt.upload(bias), rt.buffer(m, "float32")
rt.launch(mc.BIAS_RELU, c, bb, m, n, grid=(m * n + 255) // 256, block=256)
rt.launch(mc.ROW_SUM, c, out, m, n, grid=m, block=256)
got, sums = rt.read(c), rt.read(out)
ok = bool((got == np.maximum(C + bias, 0)).all())
print(json.dumps({
    "c": hashlib.sha256(got.tobytes()).hexdigest(),
    "out": hashlib.sha256(sums.tobytes()).hexdigest(),
    "ok": ok, "kernels": len(warmcli.report().kernels),
}))
"""


def _release(text: str) -> tuple[int, int]:
    found = re.search(r"release (\d+)\.(\d+)", text)
    assert found is not None, text
    return int(found.group(1)), int(found.group(2))


@pytest.mark.parametrize("prebuilt", _prebuilt() or [None], ids=lambda p: p.name if p else "none")
def test_a_prebuild_by_a_newer_minor_release_is_served(
    warm: Warm, tmp_path: Path, prebuilt: Path | None
) -> None:
    """Served as it came (no `warm run` here: warming builds with this machine's own
    compiler; production serves any build that loads), strictly, compiling nothing."""
    arch = gpu_arch_or_skip()
    if prebuilt is None:
        pytest.skip("no pre-built bundles (GPU_CHECK_PREBUILT)")
    bundle = shutil.copy(prebuilt, tmp_path / prebuilt.name)
    stats = warm.json("stats", bundle)
    built = {_release(k["toolchain"]) for k in stats["kernels"] if k["arch"] == arch}
    (gpu,) = [d for d in warm.json("devices")["devices"] if d["id"] == "cuda:0"]
    cold = warm.production(SERVE_KERNELS, EXAMPLES)
    assert cold["ok"] and cold["kernels"] == 2, cold
    hot = Warm(dict(warm.env, WARM_STRICT="1")).production(SERVE_KERNELS, EXAMPLES, bundle=bundle)
    why = f"built by CUDA {sorted(built)}, driver {gpu['driver']}"
    assert hot["ok"] and hot["kernels"] == 0, why
    assert (hot["c"], hot["out"]) == (cold["c"], cold["out"]), why
