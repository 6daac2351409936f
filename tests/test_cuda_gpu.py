"""The CUDA device on a real GPU: launches agree with numpy, event timing measures.

Marked `gpu`: skipped cleanly where `list_cuda_devices()` is empty (no pycuda,
no driver or no GPU), which is every CI machine. Run by `scripts/gpu-check`.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from warmcli.backends.base import Device, DeviceError, LaunchConfig
from warmcli.backends.compiler import CompileUnit
from warmcli.backends.cuda.device import CudaDevice, list_cuda_devices
from warmcli.kernel import Kernel, kernel_key

pytestmark = pytest.mark.gpu

SAXPY = Kernel(
    """\
extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}
""",
    "saxpy",
    "fPPi",
    language="cuda",
)


@pytest.fixture(scope="module")
def device() -> Iterator[CudaDevice]:
    if not list_cuda_devices():
        pytest.skip("no CUDA GPU: list_cuda_devices() is empty (pycuda, driver or GPU missing)")
    dev = CudaDevice(0)
    try:
        yield dev
    finally:
        dev.close()


def _build(device: CudaDevice, kernel: Kernel, arch: str | None = None) -> tuple[bytes, str]:
    arch = arch or device.arch
    compiler = device.compiler("cuda")
    unit = CompileUnit(kernel_key(kernel, arch, compiler.toolchain.identity), kernel, arch)
    group = compiler.compile_group([unit])
    return group.binary, group.symbols[unit.key]


@pytest.fixture(scope="module")
def saxpy(device: CudaDevice):
    binary, symbol = _build(device, SAXPY)
    return device.get_function(device.load_module(binary), symbol, SAXPY)


def test_device_describes_itself(device: CudaDevice):
    info = list_cuda_devices()[0]
    assert isinstance(device, Device)
    assert device.arch == info["arch"] and device.name == info["name"]
    assert device.fingerprint.driver == info["driver_version"]


def test_saxpy_matches_numpy(device: CudaDevice, saxpy: object):
    n = 10_000
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(n, np.float32), rng.standard_normal(n, np.float32)
    bx, by = device.allocate((n,), "float32"), device.allocate((n,), "float32")
    device.upload(bx, x)
    device.upload(by, y)
    stream = device.new_stream()
    config = LaunchConfig(grid=((n + 255) // 256, 1, 1), block=(256, 1, 1))
    device.launch(saxpy, SAXPY, [2.5, bx, by, n], config, stream)
    stream.synchronize()
    out = device.download(by)
    assert out.shape == (n,) and out.dtype == np.float32
    # the GPU fuses a*x+y into one rounding (an FMA), numpy rounds twice: both within half
    # an ulp of the exact result, which float64 holds
    exact = 2.5 * x.astype(np.float64) + y
    np.testing.assert_allclose(out, exact, rtol=2**-23, atol=0)


def test_event_timing_is_positive(device: CudaDevice, saxpy: object):
    n = 1 << 20
    bx, by = device.allocate((n,), "float32"), device.allocate((n,), "float32")
    stream = device.new_stream()
    config = LaunchConfig(grid=(n // 256, 1, 1), block=(256, 1, 1))

    def run() -> None:
        for _ in range(10):
            device.launch(saxpy, SAXPY, [1.0, bx, by, n], config, stream)

    seconds = device.time(stream, run)
    assert 0 < seconds < 10


def test_cubin_for_another_sm_is_refused_before_loading(device: CudaDevice):
    other = "sm_80" if not device.arch.startswith("sm_8") else "sm_90"
    binary, _ = _build(device, SAXPY, other)
    with pytest.raises(DeviceError, match=f"build it with --arch {device.arch}"):
        device.load_module(binary)


LETTERS = Kernel(
    """\
#include <cuda_fp16.h>
extern "C" __global__ void letters(double *out, unsigned char B, bool t, __half e,
                                   unsigned int I, unsigned long long Q, signed char b) {
    out[0] = B; out[1] = t; out[2] = __half2float(e); out[3] = I; out[4] = (double)Q;
    out[5] = b;
}
""",
    "letters",
    "PB?eIQb",
    language="cuda",
)


def test_unsigned_bool_and_half_letters_reach_the_kernel(device: CudaDevice):
    from warmcli.backends.base import LaunchError

    binary, symbol = _build(device, LETTERS)
    function = device.get_function(device.load_module(binary), symbol, LETTERS)
    out = device.allocate((6,), "float64")
    stream = device.new_stream()
    args = [out, 255, True, -2.5, 2**32 - 1, 2**40, -128]
    device.launch(function, LETTERS, args, LaunchConfig(), stream)
    stream.synchronize()
    assert device.download(out).tolist() == [255.0, 1.0, -2.5, 2**32 - 1, 2**40, -128.0]
    with pytest.raises(LaunchError, match=r"argument 2 \('B', uint8\).*got 256"):
        device.launch(function, LETTERS, [out, 256, True, 0.0, 0, 0, 0], LaunchConfig(), stream)
    with pytest.raises(LaunchError, match=r"argument 1 \('P', pointer.*got 7 \(int\)"):
        device.launch(function, LETTERS, [7, 1, True, 0.0, 0, 0, 0], LaunchConfig(), stream)
