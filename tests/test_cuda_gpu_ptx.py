"""PTX through the driver on a real GPU: a bundle built for an older arch is served by JIT.

Marked `gpu`: skipped cleanly where `list_cuda_devices()` is empty (no pycuda, no
driver or no GPU), which is every CI machine. Run by `scripts/gpu-check`. The
bundle is warmed for the newest architecture older than the GPU's (sm_80 for an
sm_90 GPU) with its PTX kept, so the GPU has no cubin it can run and must be
served the PTX, JIT-compiled by the driver; the results must equal numpy's.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import test_cuda_gpu

from warmcli.backends.base import DeviceError
from warmcli.backends.cuda.arch import ArchDevice
from warmcli.backends.cuda.device import CudaDevice
from warmcli.bundle.store import Bundle
from warmcli.execution.process_mode import ProcessMode, ProcessModeOverride
from warmcli.runtime.runtime import Runtime

pytestmark = pytest.mark.gpu
SAXPY = test_cuda_gpu.SAXPY
device = test_cuda_gpu.device  # the GPU fixture: skips where no GPU is visible

OLDER = {100: "sm_90", 90: "sm_80", 89: "sm_80", 86: "sm_80", 80: "sm_75"}


@pytest.fixture(scope="module")
def older_bundle(device: CudaDevice, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle of SAXPY for an arch older than the GPU's: its cubin and its PTX."""
    sm = int(re.sub(r"\D", "", device.arch))
    older = OLDER.get(sm) or next((f"sm_{s}" for s in (90, 80, 75) if s < sm), None)
    if older is None:
        pytest.skip(f"no architecture older than {device.arch} to build for")
    path = tmp_path_factory.mktemp("ptx") / "older.warm"
    with Bundle.open(path, write=True) as bundle:
        rt = Runtime(ArchDevice(older, ptx="auto"), bundle, misses=None)
        with ProcessModeOverride(ProcessMode.COMPILE_ONLY):
            rt.kernels.queue(SAXPY)
            rt.kernels.flush()
        rt.persist(bundle)
    return path


def test_a_gpu_newer_than_every_cubin_runs_the_bundles_ptx(
    device: CudaDevice, older_bundle: Path
) -> None:
    n = 5000
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, dtype=np.float32)
    with Bundle.open(older_bundle) as bundle, ProcessModeOverride(ProcessMode.EXECUTE) as c:
        rt = Runtime(device, bundle)
        dx, dy = rt.upload(x), rt.upload(y)
        rt.launch(SAXPY, np.float32(2.0), dx, dy, n, grid=(n + 255) // 256, block=256)
        got = rt.read(dy)
    np.testing.assert_allclose(got, 2.0 * x + 1.0)
    stats = c.reader().compilation
    assert (stats.compiled, stats.loaded, stats.ptx_jit) == (0, 1, 1)


def test_ptx_newer_than_the_driver_is_refused_before_the_driver_sees_it(
    device: CudaDevice, older_bundle: Path
) -> None:
    with Bundle.open(older_bundle) as bundle:
        record = next(r for r in bundle.kernels() if r.arch.startswith("compute_"))
        ptx = bundle.blob(record.sha256)
    future = re.sub(rb"^\.version \d+\.\d+", b".version 99.0", ptx, count=1, flags=re.M)
    with pytest.raises(DeviceError, match="CUDA_ERROR_UNSUPPORTED_PTX_VERSION"):
        device.load_module(future)
    module = device.load_module(ptx)  # the real one loads: JIT by this driver
    assert device.get_function(module, record.symbol, SAXPY) is not None
