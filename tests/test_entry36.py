"""A host kernel's entry whose declaration leaves its arguments unchecked is refused, named.

Real `warm run` in a subprocess with the real cc: a variadic entry (`void put(double *o,
...)`) given letters `Pf` compiled, and ctypes passed its float unpromoted where the entry
read a double (`va_arg(ap, double)`): 2.5 was written as 4.66e-310, cold, warmed and served
alike, silently. It now fails
its compile with one line that says why, as an old-style (K&R) entry does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.cuda.nvrtc import find_nvrtc

needs_nvrtc = pytest.mark.skipif(find_nvrtc() is None, reason="NVRTC not installed")

WORKLOAD = r'''
from warmcli import Kernel
DEVICE = "host"
SOURCE = """
#include <stdarg.h>
void put(double *o, ...) { va_list ap; va_start(ap, o); o[0] = va_arg(ap, double); va_end(ap); }
"""
K = Kernel(SOURCE, "put", "Pf")
def workload(rt):
    o = rt.buffer(1, "float64")
    rt.launch(K, o, 2.5)
'''


def test_a_variadic_entry_fails_its_compile_named(warm: Warm, tmp_path: Path) -> None:
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    done = warm("run", workload, "-b", bundle, "-q", "--allow-discarded-reads")
    assert done.returncode == 2, done.stderr
    assert "is variadic" in done.stderr and "Traceback" not in done.stderr, done.stderr


CUDA_COUNTERS = r"""
from warmcli import Kernel
DEVICE = "cuda"
def src(v):
    return ('extern "C" { __device__ int counter; }\n'
            'extern "C" __global__ void k%d(int *o) { counter += %d; o[0] = counter; }\n' % (v, v))
KS = [Kernel(src(v), f"k{v}", "P", language="cuda") for v in (1, 2)]
def workload(rt):
    o = rt.buffer(1, "int32")
    for k in KS:
        rt.launch(k, o, grid=1, block=1)
"""


@needs_nvrtc
def test_cuda_kernels_with_a_c_linkage_device_variable_never_share_one_cubin(
    warm: Warm, tmp_path: Path
) -> None:
    """Two plain CUDA kernels whose `extern "C" { __device__ int counter; }` is state they
    keep were batched into one cubin (one blob for both): one `counter` object, so a hit
    would compute k2's 3 where a cold start, compiling k2 alone, computes 2. Each is built
    alone now (build recipe 3: a recipe 2 bundle's shared cubin is never served)."""
    workload = tmp_path / "w.py"
    workload.write_text(CUDA_COUNTERS)
    bundle = tmp_path / "b.warm"
    done = warm("run", workload, "--arch", "sm_90", "-b", bundle, "-q", "-j", "1")
    assert done.returncode == 0, done.stderr
    blobs = {
        k["label"]: k["sha256"]
        for k in warm.json("stats", bundle)["kernels"]
        if k["arch"] == "sm_90"
    }
    assert len(blobs) == 2 and blobs["k1"] != blobs["k2"], blobs
