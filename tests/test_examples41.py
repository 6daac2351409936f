"""PyCUDA's own examples (inducer/pycuda, MIT licence: `examples/`) run as a user brings
them, `warm run X.py --pycuda --arch sm_90`, GPU-less: each snippet below is cut down from
the example it names, its GPU work moved into `main()` as the README asks. The real CLI in
a subprocess, the real NVRTC.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm

from warmcli.backends.cuda.nvrtc import find_nvrtc

pytestmark = pytest.mark.skipif(find_nvrtc() is None, reason="NVRTC not installed")

# From PyCUDA's examples/demo_meta_template.py and examples/demo_struct.py: the result read
# back with `cuda.from_device_like` / `cuda.from_device`, PyCUDA's own read-back helpers.
FROM_DEVICE = '''
import numpy
import pycuda.driver as cuda
from pycuda.compiler import SourceModule


def main():
    a = numpy.random.randn(512).astype(numpy.float32)
    b = numpy.random.randn(512).astype(numpy.float32)
    a_gpu = cuda.to_device(a)
    b_gpu = cuda.to_device(b)
    c_gpu = cuda.mem_alloc(a.nbytes)
    mod = SourceModule("""
    __global__ void add(float *tgt, float *op1, float *op2)
    {
      int idx = threadIdx.x + 32 * blockIdx.x;
      tgt[idx] = op1[idx] + op2[idx];
    }""")
    func = mod.get_function("add")
    func(c_gpu, a_gpu, b_gpu, block=(32, 1, 1), grid=(16, 1))
    c = cuda.from_device_like(c_gpu, a)
    d = cuda.from_device(c_gpu, (16, 32), numpy.float32)
    print("shapes", c.shape, c.dtype, d.shape, d.dtype)
'''


def test_from_device_is_a_discarded_read_not_a_lacking_part(warm: Warm, tmp_path: Path) -> None:
    """`drv.from_device(_like)` is PyCUDA's read back (an array, then `memcpy_dtoh` into it):
    the stand-ins lacked it, so two of PyCUDA's own examples failed the pre-build with 'not in
    warm's GPU-less stand-in' for a read, which `memcpy_dtoh` and `GPUArray.get` are not."""
    script = tmp_path / "demo_from_device.py"
    script.write_text(FROM_DEVICE)
    bundle = tmp_path / "b.warm"
    args = ("run", script, "--pycuda", "--arch", "sm_90", "-b", bundle, "--quiet")
    allowed = warm(*args, "--allow-discarded-reads")
    assert allowed.returncode == 0, allowed.stderr
    assert "shapes (512,) float32 (16, 32) float32" in allowed.stdout
    said = allowed.stdout + allowed.stderr
    assert "read of from_device_like of 2048 bytes under CompileOnly" in said
    assert "read of from_device of 2048 bytes under CompileOnly" in said
    assert "stored 2 new kernel(s)" in allowed.stdout
    refused = warm(*args)
    assert refused.returncode == 2
    (line,) = refused.stderr.strip().splitlines()
    assert "DiscardedReadError: read of from_device_like of 2048 bytes" in line


# From PyCUDA's examples/from-wiki/matrixmul_tiled.py: `uint`, a glibc typedef
# (<sys/types.h>) that nvcc's implicit host headers bring and NVRTC lacks.
UINT = '''
import numpy as np
import pycuda.driver as drv
from pycuda.compiler import SourceModule


def main():
    mod = SourceModule("""
    __global__ void MatrixMulKernel(float *A, float *B, float *C)
    {
      const uint wA = 4;
      const uint tx = threadIdx.x;
      C[tx] = A[tx] * B[tx] * wA;
    }
    """)
    a = drv.mem_alloc(64)
    mod.get_function("MatrixMulKernel")(a, a, a, block=(16, 1, 1), grid=(1, 1))
'''


def test_a_glibc_typedef_under_nvrtc_gets_the_host_header_hint(warm: Warm, tmp_path: Path) -> None:
    """NVRTC's log for `uint` (`identifier "uint" is undefined`) ended with no warm line, where
    `int64_t` or `INFINITY` name `--compiler nvcc`, which builds it as PyCUDA does."""
    script = tmp_path / "matrixmul_tiled.py"
    script.write_text(UINT)
    done = warm("run", script, "--pycuda", "--arch", "sm_90", "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 2
    assert 'identifier "uint" is undefined' in done.stderr
    assert "warm: NVRTC reads none of the host headers nvcc's cuda_runtime.h brings" in done.stderr
