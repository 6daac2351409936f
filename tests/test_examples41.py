"""PyCUDA's own examples (inducer/pycuda, MIT licence: `examples/`) run as a user brings
them, `warm run X.py --pycuda --arch sm_90`, GPU-less: each snippet below is cut down from
the example it names, its GPU work moved into `main()` as the README asks. The real CLI in
a subprocess, the real NVRTC.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

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


# From PyCUDA's examples/demo_struct.py: the second struct of an array of two, passed by
# its address as `numpy.uintp`, which PyCUDA's call packs as the 8 bytes of a pointer.
STRUCT_ADDRESS = '''
import numpy
import pycuda.driver as cuda
from pycuda.compiler import SourceModule


def main():
    struct_arr = cuda.mem_alloc(2 * 16)
    do2_ptr = int(struct_arr) + 16
    mod = SourceModule("""
    struct DoubleOperation {
        int datalen, __padding; // so 64-bit ptrs can be aligned
        float *ptr;
    };

    __global__ void double_array(DoubleOperation *a)
    {
        a = a + blockIdx.x;
        for (int idx = threadIdx.x; idx < a->datalen; idx += blockDim.x)
            a->ptr[idx] *= 2;
    }
    """)
    func = mod.get_function("double_array")
    func(struct_arr, block=(32, 1, 1), grid=(2, 1))
    func(numpy.uintp(do2_ptr), block=(32, 1, 1), grid=(1, 1))
    func.prepare("P")
    func.prepared_call((1, 1), (32, 1, 1), do2_ptr)
'''


def test_an_address_as_numpy_uintp_in_a_call_is_that_pointer(warm: Warm, tmp_path: Path) -> None:
    """PyCUDA's call packs a `np.uintp` as its 8 bytes, which a pointer parameter reads as
    the address: warm refused it ('a uint64 scalar for a pointer'), so PyCUDA's
    demo_struct.py failed a pre-build it runs on a GPU (a prepared `P` took the same int)."""
    script = tmp_path / "demo_struct.py"
    script.write_text(STRUCT_ADDRESS)
    done = warm("run", script, "--pycuda", "--arch", "sm_90", "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 0, done.stderr
    assert "stored 2 new kernel(s)" in done.stdout


def test_a_narrower_integer_for_a_pointer_stays_refused_saying_why() -> None:
    """An `np.int32` PyCUDA packs in 4 bytes where the kernel reads 8: refused, and the line
    says what to pass."""
    from warmcli import ProcessMode, ProcessModeOverride
    from warmcli.backends.cuda.arch import ArchDevice
    from warmcli.pycuda import ArgumentError, SourceModule, bound_runtime
    from warmcli.runtime.runtime import Runtime

    f = SourceModule("__global__ void f(float *x) { x[0] = 1.0f; }").get_function("f")
    with bound_runtime(Runtime(ArchDevice("sm_90"))), ProcessModeOverride(ProcessMode.COMPILE_ONLY):
        f(np.uintp(4096), block=(1, 1, 1))
        f(np.int64(4096), block=(1, 1, 1))
        with pytest.raises(ArgumentError, match=r"a int32 scalar for a pointer: PyCUDA packs"):
            f(np.int32(4096), block=(1, 1, 1))


# From PyCUDA's test/test_driver.py (test_gpuarray_cai): a GPUArray's CUDA Array Interface.
CAI = """
import numpy as np
from pycuda import gpuarray


def main():
    a_g = gpuarray.to_gpu(np.zeros(10, dtype=np.float32))
    cai = a_g.__cuda_array_interface__
"""


def test_a_stand_in_gpuarrays_cuda_array_interface_is_named_as_the_stand_ins_lack(
    warm: Warm, tmp_path: Path
) -> None:
    """PyCUDA's GPUArray has `__cuda_array_interface__`; the stand-in's lack of it was a bare
    `AttributeError: __cuda_array_interface__`, not saying it is warm's stand-in that lacks it
    (a dunder, which stays an AttributeError: warm's own wrap() probes it with getattr)."""
    script = tmp_path / "test_driver_cai.py"
    script.write_text(CAI)
    done = warm("run", script, "--pycuda", "--arch", "sm_90", "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "test_driver_cai.py:8: AttributeError: GPUArray.__cuda_array_interface__: " in line
    assert "not in warm's GPU-less stand-in for pycuda (warm run --arch)" in line


# From PyCUDA's examples/from-wiki/using_printf.py (and threads_and_blocks.py,
# test/test_driver.py's test_large_smem): <stdio.h> for a kernel's printf.
PRINTF = '''
from pycuda.compiler import SourceModule


def main():
    mod = SourceModule("""
        #include <stdio.h>

        __global__ void say_hi()
        {
          printf("I am %d.%d\\\\n", threadIdx.x, threadIdx.y);
        }
        """)
    mod.get_function("say_hi")(block=(4, 4, 1))
'''


def test_stdio_h_under_nvrtc_says_nvrtc_declares_printf_itself(warm: Warm, tmp_path: Path) -> None:
    """NVRTC lacks <stdio.h> but declares printf itself: warm's line sent the user to CUDA's
    own headers (`<cuda/std/cstdint>`...), of which none is stdio's; it now says to drop the
    include (the same kernel without it compiles under NVRTC) or build with nvcc."""
    script = tmp_path / "using_printf.py"
    script.write_text(PRINTF)
    args = ("run", script, "--pycuda", "--arch", "sm_90", "-q")
    done = warm(*args, "-b", tmp_path / "b.warm")
    assert done.returncode == 2
    assert 'cannot open source file "stdio.h"' in done.stderr
    assert "warm: NVRTC declares printf and CUDA's math functions itself" in done.stderr
    assert "<cuda/std/cstdint>" not in done.stderr
    script.write_text(PRINTF.replace("#include <stdio.h>", ""))
    dropped = warm(*args, "-b", tmp_path / "c.warm")
    assert dropped.returncode == 0, dropped.stderr


# From PyCUDA's test/test_driver.py (test_streamed_kernel): page-locked host memory for
# asynchronous copies on a stream, the output made with `pagelocked_empty_like`.
STREAMED = '''
import numpy as np
import pycuda.driver as drv
from pycuda.compiler import SourceModule


def main():
    mod = SourceModule("""
    __global__ void multiply_them(float *dest, float *a, float *b)
    {
      const int i = threadIdx.x*blockDim.y + threadIdx.y;
      dest[i] = a[i] * b[i];
    }
    """)
    multiply_them = mod.get_function("multiply_them")
    shape = (32, 8)
    a = drv.pagelocked_zeros(shape, dtype=np.float32)
    a_gpu = drv.mem_alloc(a.nbytes)
    strm = drv.Stream()
    drv.memcpy_htod_async(a_gpu, a, strm)
    dest = drv.pagelocked_empty_like(a)
    again = drv.pagelocked_zeros_like(a)
    multiply_them(drv.Out(dest), a_gpu, a_gpu, block=(*shape, 1), stream=strm)
    strm.synchronize()
    print("host", dest.shape, dest.dtype, again.shape)
'''


def test_pagelocked_like_forms_are_host_arrays_as_pagelocked_empty_is(
    warm: Warm, tmp_path: Path
) -> None:
    """`drv.pagelocked_empty` and `pagelocked_zeros` stood in (host memory, no GPU needed),
    their `_like` forms did not: PyCUDA's streamed-kernel test failed a pre-build there."""
    script = tmp_path / "streamed.py"
    script.write_text(STREAMED)
    args = ("run", script, "--pycuda", "--arch", "sm_90", "-q", "--allow-discarded-reads")
    done = warm(*args, "-b", tmp_path / "b.warm")
    assert done.returncode == 0, done.stderr
    assert "host (32, 8) float32 (32, 8)" in done.stdout
    assert "stored 2 new kernel(s)" in done.stdout
