"""The README's CUDA claims on a real GPU, end to end through the CLI and fresh production
processes: a cold start and a strict hot one compute the same bits; a GPU-less pre-build
is pending until a GPU measures it, then served strictly; NVRTC and nvcc builds agree;
PyTorch's and CuPy's device arrays launch warm's kernels in the primary context they share.

Marked `gpu`: run alone (`pytest -m gpu`), skipped cleanly without a CUDA device. Run by
`scripts/gpu-check` on a GPU machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, Warm, gpu_arch_or_skip

pytestmark = pytest.mark.gpu

# A production process: the example's matmul tune, bias+ReLU and row sum on one shape,
# digests of what it read back, its error against numpy, and what it compiled or tuned.
SERVE_MATMUL_CUDA = """
import hashlib, json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import warmcli, matmul_cuda as mc

rt = warmcli.runtime("cuda")
rng = np.random.default_rng(1)
m, n, k = 512, 384, 640
A = rng.standard_normal((m, k), dtype=np.float32)
B = rng.standard_normal((k, n), dtype=np.float32)
bias = rng.standard_normal(n, dtype=np.float32)
a, b, bb = rt.upload(A), rt.upload(B), rt.upload(bias)
c, out = rt.buffer((m, n), "float32"), rt.buffer(m, "float32")
rt.tune(mc.MATMUL, a, b, c, m, n, k)
rt.launch(mc.BIAS_RELU, c, bb, m, n, grid=(m * n + 255) // 256, block=256)
rt.launch(mc.ROW_SUM, c, out, m, n, grid=m, block=256)
C, O = rt.read(c), rt.read(out)
ref = np.maximum(A.astype(np.float64) @ B.astype(np.float64) + bias, 0)
r = warmcli.report()
print(json.dumps({
    "c": hashlib.sha256(C.tobytes()).hexdigest(),
    "out": hashlib.sha256(O.tobytes()).hexdigest(),
    "err": float(np.abs(C - ref).max() / np.abs(ref).max()),
    "sum_err": float(np.abs(O - ref.sum(axis=1)).max() / np.abs(ref.sum(axis=1)).max()),
    "kernels": len(r.kernels), "tunes": len(r.tunes),
}))
"""


def serve(warm: Warm, bundle: Path | None, **env: str) -> dict[str, Any]:
    production = Warm(dict(warm.env, **env))
    doc = production.production(SERVE_MATMUL_CUDA, EXAMPLES, bundle=bundle)
    assert doc["err"] < 1e-4 and doc["sum_err"] < 1e-4, doc
    return doc


def test_cold_and_strict_hot_starts_compute_the_same_bits(warm: Warm, bundle_path: Path) -> None:
    """Every matmul candidate sums over k in the same order, so whichever one a cold
    start's own tuning picks, its bits equal those of the bundle's pick."""
    gpu_arch_or_skip()
    cold = serve(warm, None)
    assert cold["kernels"] > 0 and cold["tunes"] == 1, "no bundle: it compiles and tunes"
    doc = warm.json("run", EXAMPLES / "matmul_cuda.py", "--device", "cuda:0", "-b", bundle_path)
    assert doc["verified"] is True
    hot = serve(warm, bundle_path, WARM_STRICT="1")
    assert hot["kernels"] == 0 and hot["tunes"] == 0, "strict hot start compiled or tuned"
    assert (hot["c"], hot["out"]) == (cold["c"], cold["out"])
    check = warm("check", bundle_path, "--device", "cuda:0")
    assert check.returncode == 0, check.stdout + check.stderr


def test_gpu_less_prebuild_is_pending_until_a_gpu_measures_it(
    warm: Warm, bundle_path: Path
) -> None:
    """The CI pre-build (no GPU visible, `--arch` named), then the production machine:
    `warm check` fails on the pending tunes, a `warm run` there measures them compiling
    nothing, and a strict hot start is served every kernel and pick."""
    arch = gpu_arch_or_skip()
    hidden = Warm(dict(warm.env, CUDA_VISIBLE_DEVICES=""))
    pre = hidden.json("run", EXAMPLES / "matmul_cuda.py", "--arch", arch, "-b", bundle_path)
    assert pre["passes"][-1]["autotune"]["measured"] == 0
    pending = warm("check", bundle_path, "--device", "cuda:0", "--json")
    assert pending.returncode == 1, pending.stdout + pending.stderr
    assert "pending" in pending.stdout
    doc = warm.json("run", EXAMPLES / "matmul_cuda.py", "--device", "cuda:0", "-b", bundle_path)
    _, second, verify = doc["passes"]
    assert second["compilation"]["compiled"] == 0 and second["autotune"]["measured"] == 3
    assert verify["compilation"]["compiled"] == 0 and verify["autotune"]["measured"] == 0
    check = warm("check", bundle_path, "--device", "cuda:0")
    assert check.returncode == 0, check.stdout + check.stderr
    hot = serve(warm, bundle_path, WARM_STRICT="1")
    assert hot["kernels"] == 0 and hot["tunes"] == 0


def test_nvrtc_and_nvcc_builds_serve_the_same_results(warm: Warm, tmp_path: Path) -> None:
    gpu_arch_or_skip()
    served = {}
    for compiler in ("nvrtc", "nvcc"):
        bundle = tmp_path / f"{compiler}.warm"
        proc = warm(
            "run", EXAMPLES / "matmul_cuda.py", "--device", "cuda:0", "--compiler", compiler,
            "-b", bundle, "--json",
        )  # fmt: skip
        if proc.returncode != 0 and ("not found" in proc.stderr or "not available" in proc.stderr):
            pytest.skip(f"{compiler}: {proc.stderr.strip()}")
        assert proc.returncode == 0, proc.stderr
        served[compiler] = serve(warm, bundle, WARM_STRICT="1")
        assert served[compiler]["kernels"] == 0 and served[compiler]["tunes"] == 0
    stats = {c: warm.json("stats", tmp_path / f"{c}.warm") for c in served}
    assert all(s["kernels"] for s in stats.values())


# warm's kernels launched on a framework's own device memory, through warm's PyCUDA
# layer, in the primary context the framework shares; the framework then reads the result.
FOREIGN_ARRAYS = """
import json, sys
import numpy as np
import {framework} as fw
import warmcli.pycuda.autoinit
from warmcli.pycuda import SourceModule

mod = SourceModule('''
__global__ void twice_plus(float *x, const float *y, int n) {{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = 2.0f * x[i] + y[i];
}}''')
f = mod.get_function("twice_plus")
n = 100003
x = ({make})(np.arange(n, dtype=np.float32))
y = ({make})(np.full(n, 0.5, dtype=np.float32))
f(x, y, np.int32(n), block=(256, 1, 1), grid=((n + 255) // 256, 1))
got = ({back})(x)
print(json.dumps({{"ok": bool((got == 2.0 * np.arange(n, dtype=np.float32) + 0.5).all())}}))
"""
FRAMEWORKS = {
    "torch": (
        "lambda a: fw.from_numpy(a).to('cuda')",
        "lambda t: (fw.cuda.synchronize(), t.cpu().numpy())[1]",
    ),
    "cupy": ("fw.asarray", "fw.asnumpy"),
}


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_framework_arrays_launch_warm_kernels(warm: Warm, framework: str) -> None:
    gpu_arch_or_skip()
    pytest.importorskip(framework)
    make, back = FRAMEWORKS[framework]
    code = FOREIGN_ARRAYS.format(framework=framework, make=make, back=back)
    assert warm.production(code) == {"ok": True}
