"""warmcli.pycuda on a real GPU with real PyCUDA: its argument objects, prepared calls,
streams, globals and the autotune decorator, results checked against numpy.

Marked `gpu`: skipped cleanly where `list_cuda_devices()` is empty (no pycuda, no driver
or no GPU). Run by `scripts/gpu-check`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import EXAMPLES, ROOT, Warm

from warmcli import Kernel, ProcessMode, ProcessModeOverride, Runtime
from warmcli.backends.cuda.device import CudaDevice, list_cuda_devices
from warmcli.pycuda import In, InOut, Out, SourceModule, autotune, bound_runtime

pytestmark = pytest.mark.gpu
N = 10_000
GRID = ((N + 255) // 256, 1)
BLOCK = (256, 1, 1)

MOD = SourceModule("""
    __global__ void multiply_them(float *dest, const float *a, const float *b, int n)
    {
        const int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) dest[i] = a[i] * b[i];
    }

    __global__ void saxpy(float alpha, const float *x, float *y, int n)
    {
        const int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = alpha * x[i] + y[i];
    }

    __global__ void twice(float *x, int n)
    {
        const int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] *= 2.0f;
    }
""")
SCALER = SourceModule("""
    __constant__ float factor[1];
    __global__ void scale(float *x, int n)
    {
        const int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) x[i] *= factor[0];
    }
""")


@pytest.fixture(scope="module")
def rt() -> Iterator[Runtime]:
    if not list_cuda_devices():
        pytest.skip("no CUDA GPU: list_cuda_devices() is empty (pycuda, driver or GPU missing)")
    runtime = Runtime(CudaDevice(0))
    try:
        yield runtime
    finally:
        runtime.close()


@pytest.fixture
def drv(rt: Runtime) -> Iterator[object]:
    """pycuda.driver, with the runtime bound (its primary context current)."""
    import pycuda.driver

    with bound_runtime(rt):
        yield pycuda.driver


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.standard_normal(N, np.float32), rng.standard_normal(N, np.float32)


def test_in_out_and_inout_copy_like_pycuda(drv) -> None:
    a, b = _inputs()
    for make_in, make_out, make_inout in ((drv.In, drv.Out, drv.InOut), (In, Out, InOut)):
        dest = np.zeros_like(a)
        MOD.get_function("multiply_them")(
            make_out(dest), make_in(a), make_in(b), np.int32(N), block=BLOCK, grid=GRID
        )
        np.testing.assert_allclose(dest, a * b, rtol=1e-6)
        x = a.copy()
        MOD.get_function("twice")(make_inout(x), np.int32(N), block=BLOCK, grid=GRID)
        np.testing.assert_allclose(x, 2 * a, rtol=1e-6)


def test_device_allocation_and_gpuarray(drv, rt: Runtime) -> None:
    import pycuda.gpuarray as gpuarray

    a, b = _inputs()
    x = drv.mem_alloc(a.nbytes)
    drv.memcpy_htod(x, a)
    y = gpuarray.to_gpu(b)
    MOD.get_function("saxpy")(np.float32(2.0), x, y, np.int32(N), block=BLOCK, grid=GRID)
    rt.synchronize()
    np.testing.assert_allclose(y.get(), 2 * a + b, rtol=1e-5, atol=1e-6)


def test_prepared_calls_on_pycuda_streams(drv, rt: Runtime) -> None:
    import pycuda.gpuarray as gpuarray

    a, b = _inputs()
    x, y = gpuarray.to_gpu(a), gpuarray.to_gpu(b)
    saxpy = MOD.get_function("saxpy").prepare("fPPi")
    saxpy.prepared_call(GRID, BLOCK, 1.0, x.gpudata, y.gpudata, N)
    stream = drv.Stream()
    saxpy.prepared_async_call(GRID, BLOCK, stream, 1.0, x.gpudata, y.gpudata, N)
    stream.synchronize()
    rt.synchronize()
    np.testing.assert_allclose(y.get(), 2 * a + b, rtol=1e-5, atol=1e-6)
    seconds = saxpy.prepared_timed_call(GRID, BLOCK, 0.0, x.gpudata, y.gpudata, N)()
    assert 0 < seconds < 10


class CudaArray:
    """Real device memory exported through `__cuda_array_interface__`, as CuPy, PyTorch and
    Numba arrays export theirs."""

    def __init__(self, drv, array: np.ndarray) -> None:
        self.memory = drv.to_device(array)
        self.__cuda_array_interface__ = {
            "shape": array.shape,
            "typestr": array.dtype.str,
            "data": (int(self.memory), False),
            "version": 3,
        }


def test_cuda_array_interface_and_rt_wrap(drv, rt: Runtime) -> None:
    a, b = _inputs()
    x, y = CudaArray(drv, a), CudaArray(drv, b)
    MOD.get_function("saxpy")(np.float32(3.0), x, y, np.int32(N), block=BLOCK, grid=GRID)
    axpy = Kernel(
        'extern "C" __global__ void axpy(float a, const float *x, float *y, int n) {'
        " int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += a * x[i]; }",
        "axpy",
        "fPPi",
        language="cuda",
    )
    rt.launch(axpy, -1.0, rt.wrap(x), rt.wrap(y), N, grid=GRID, block=BLOCK)
    rt.synchronize()
    out = np.empty_like(b)
    drv.memcpy_dtoh(out, y.memory)
    np.testing.assert_allclose(out, 2 * a + b, rtol=1e-5, atol=1e-6)


def test_get_global_sets_a_constant(drv, rt: Runtime) -> None:
    a, _ = _inputs()
    pointer, size = SCALER.get_global("factor")
    assert size == 4
    drv.memcpy_htod(pointer, np.array([0.25], np.float32))
    x = a.copy()
    SCALER.get_function("scale")(drv.InOut(x), np.int32(N), block=BLOCK, grid=GRID)
    np.testing.assert_allclose(x, 0.25 * a, rtol=1e-6)


def test_autotune_measures_once_then_hits(drv, rt: Runtime) -> None:
    source = """__global__ void copy2(const float *x, float *y, int n) {
        int i = blockIdx.x * B + threadIdx.x; if (i < n) y[i] = 2.0f * x[i]; }"""
    modules = {b: SourceModule(source, options=[f"-DB={b}"]) for b in (128, 256)}

    @autotune(configs=[{"b": 128}, {"b": 256}], key=["n"])
    def copy2(x, y, n, b):
        modules[b].get_function("copy2")(x, y, np.int32(n), block=(b, 1, 1), grid=(n // b + 1, 1))

    a, _ = _inputs()
    import pycuda.gpuarray as gpuarray

    x, y = gpuarray.to_gpu(a), gpuarray.zeros(N, np.float32)
    with ProcessModeOverride(ProcessMode.EXECUTE) as collector:
        first = copy2(x, y, N)
        second = copy2(x, y, N)
    assert first == second and first in ("b=128", "b=256")
    stats = collector.reader().autotune
    assert (stats.measured, stats.hits) == (1, 1)
    rt.synchronize()
    np.testing.assert_allclose(y.get(), 2 * a, rtol=1e-6)


def test_warm_run_pycuda_then_production_compiles_nothing(warm: Warm, tmp_path: Path) -> None:
    bundle = tmp_path / "gpu.warm"
    doc = warm.json(
        "run", EXAMPLES / "pycuda_style.py", "--pycuda", "--allow-discarded-reads",
        "--bundle", bundle,
    )  # fmt: skip
    assert doc["verified"] is True and doc["passes"][1]["autotune"]["measured"] == 1
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_STRICT="1")
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "pycuda_style.py")],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "results agree with numpy" in proc.stdout
    assert os.path.getsize(bundle) > 0
