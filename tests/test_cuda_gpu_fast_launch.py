"""A CUDA launch's pointer arguments on their fast path (a buffer the device allocated, of
its own `CudaBuffer` type, passes its address without a call) and off it: a freed buffer
is refused in one line, another device object's buffer of the same GPU still launches.

Marked `gpu`: run alone (`pytest -m gpu`), skipped cleanly without a CUDA device.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import gpu_arch_or_skip

from warmcli import Kernel, Runtime
from warmcli.backends.base import Buffer
from warmcli.errors import LaunchError

pytestmark = pytest.mark.gpu

FILL = Kernel(
    'extern "C" __global__ void fill(int *p, int v, int n) '
    "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) p[i] = v; }",
    "fill",
    "Pii",
    language="cuda",
)


def _runtime() -> Runtime:
    gpu_arch_or_skip()
    from warmcli.backends.cuda.device import CudaDevice

    return Runtime(CudaDevice(0))


def test_a_buffer_the_device_made_launches_and_computes() -> None:
    rt = _runtime()
    try:
        buffer = rt.buffer(1000, "int32")
        assert type(buffer) is not Buffer and buffer.address == int(buffer.handle)
        for v in (7, -3, 2**31 - 1):
            rt.launch(FILL, buffer, v, 1000, grid=4, block=256)
            assert (rt.read(buffer) == v).all()
    finally:
        rt.close()


def test_a_freed_buffer_is_refused_not_launched() -> None:
    rt = _runtime()
    try:
        buffer = rt.buffer(16, "int32")
        rt.launch(FILL, buffer, 1, 16, grid=1, block=32)
        rt.device.free(buffer)
        assert type(buffer) is Buffer and buffer.handle is None
        with pytest.raises(LaunchError, match="a buffer on cuda:0") as caught:
            rt.launch(FILL, buffer, 1, 16, grid=1, block=32)
        assert "\n" not in str(caught.value)
    finally:
        rt.close()


def test_another_device_objects_buffer_of_this_gpu_still_launches() -> None:
    one, two = _runtime(), _runtime()
    try:
        theirs = two.upload(np.zeros(64, dtype=np.int32))
        one.launch(FILL, theirs, 5, 64, grid=1, block=64)  # off the fast path: checked, passed
        one.synchronize()
        assert (two.read(theirs) == 5).all()
    finally:
        one.close()
        two.close()
