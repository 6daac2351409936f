"""The warming passes on a real GPU, through the CLI: measured tunes, pre-built cubins reused.

Marked `gpu`: skipped cleanly without a CUDA device (every CI machine). Run by
`scripts/gpu-check` on a GPU machine.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, Warm, gpu_arch_or_skip

pytestmark = pytest.mark.gpu


def test_warm_run_measures_every_tune_and_verifies(warm: Warm, bundle_path: Path) -> None:
    doc = warm.json(
        "run", EXAMPLES / "saxpy_cuda.py", "--device", "cuda:0", "--bundle", bundle_path,
        "--jobs", "2",
    )  # fmt: skip
    first, second, verify = doc["passes"]
    assert first["compilation"]["queued"] > 0 and first["compilation"]["compiled"] == 0
    assert second["compilation"]["compiler_processes"] < second["compilation"]["compiled"]
    assert second["autotune"]["measured"] == second["autotune"]["registered"] == 6
    assert verify["compilation"]["compiled"] == 0 and verify["autotune"]["measured"] == 0
    assert doc["verified"] is True
    stats = warm.json("stats", bundle_path)
    for tune in stats["tunes"]:
        assert tune["status"] == "measured"
        ok = [c for c in tune["candidates"] if c["status"] == "ok"]
        assert tune["pick"] == min(ok, key=lambda c: c["seconds"])["name"]
        assert all(c["seconds"] > 0 and len(c["samples"]) >= 1 for c in ok)


def test_prebuilt_bundle_is_used_without_recompiling(warm: Warm, bundle_path: Path) -> None:
    arch = gpu_arch_or_skip()
    warm.json("run", EXAMPLES / "matmul_cuda.py", "--arch", arch, "--bundle", bundle_path)
    doc = warm.json(
        "run", EXAMPLES / "matmul_cuda.py", "--device", "cuda:0", "--bundle", bundle_path
    )
    first, second, verify = doc["passes"]
    assert first["compilation"]["queued"] == 0, "every cubin came from the pre-build"
    assert second["compilation"]["compiled"] == 0
    assert second["compilation"]["loaded"] > 0
    assert second["autotune"]["measured"] == 3, "the pending tunes are measured on the GPU"
    assert verify["compilation"]["compiled"] == 0 and verify["autotune"]["measured"] == 0


def test_matmul_candidates_agree_with_numpy() -> None:
    gpu_arch_or_skip()
    import importlib.util

    from warmcli import Runtime
    from warmcli.backends.cuda.device import CudaDevice

    spec = importlib.util.spec_from_file_location("matmul_cuda", EXAMPLES / "matmul_cuda.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rt = Runtime(CudaDevice(0))
    try:
        rng = np.random.default_rng(0)
        m, n, k = 100, 70, 90
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        for name, kernel in mod.MATMUL.candidates.items():
            c = rt.buffer((m, n))
            mod.launch_matmul(rt, kernel, rt.upload(a), rt.upload(b), c, m, n, k)
            np.testing.assert_allclose(rt.read(c), a @ b, rtol=1e-3, atol=1e-3, err_msg=name)
        pick = rt.tune(mod.MATMUL, rt.upload(a), rt.upload(b), rt.buffer((m, n)), m, n, k)
        assert pick in mod.MATMUL.candidates
    finally:
        rt.close()


SERVE_SAXPY = """
import json, sys
import numpy as np
import warmcli
sys.path.insert(0, sys.argv[1])
import saxpy_cuda as w
rt = warmcli.runtime("cuda:0")
n = 1 << 16
rng = np.random.default_rng(0)
x0 = rng.standard_normal(n, dtype=np.float32)
y0 = rng.standard_normal(n, dtype=np.float32)
x, y, total = rt.upload(x0), rt.upload(y0), rt.upload(np.zeros(1, np.float32))
rt.tune(w.SAXPY, 2.0, x, y, n)   # in place: y = 2x + y
rt.tune(w.SUM, y, total, n)      # accumulates into total
want = 2.0 * x0 + y0
print(json.dumps({
    "y_error": float(np.abs(rt.read(y) - want).max()),
    "total": float(rt.read(total)[0]),
    "expected_total": float(want.sum(dtype=np.float64)),
    "tunes": len(warmcli.report().tunes),
}))
"""


def test_in_place_cuda_tunes_agree_with_numpy_cold_and_hot(warm: Warm, bundle_path: Path) -> None:
    """Device-side snapshots: a cold start (every tune measured on the caller's buffers)
    and a hot one (picks from the bundle) both apply saxpy and the sum exactly once."""
    gpu_arch_or_skip()
    cold = warm.production(SERVE_SAXPY, EXAMPLES)
    assert cold["tunes"] == 2
    warm.json("run", EXAMPLES / "saxpy_cuda.py", "--device", "cuda:0", "--bundle", bundle_path)
    hot = warm.production(SERVE_SAXPY, EXAMPLES, bundle=bundle_path)
    assert hot["tunes"] == 0
    for run in (cold, hot):
        assert run["y_error"] < 1e-5
        assert abs(run["total"] - run["expected_total"]) < 1.0


def test_cuda_copy_and_free() -> None:
    gpu_arch_or_skip()
    from warmcli.backends.cuda.device import CudaDevice

    device = CudaDevice(0)
    try:
        src = device.allocate((1000,), "float32")
        dst = device.allocate((1000,), "float32")
        device.upload(src, np.arange(1000, dtype=np.float32))
        stream = device.new_stream()
        device.copy(dst, src, stream)
        stream.synchronize()
        assert device.download(dst).tolist() == list(range(1000))
        device.free(src)
        assert src.handle is None
        with pytest.raises(Exception, match="not live memory"):
            device.download(src)
    finally:
        device.close()
