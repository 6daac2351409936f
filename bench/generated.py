"""Generated workloads of N distinct kernels (rows `serve_per_kernel`, `hot_start`,
`hot_start_cuda_generated`).

`write(path, n)` writes a workload file whose `workload(runtime)` launches `n`
tiny C kernels, each distinct (its own `V` define), once each on one small
buffer: a workload whose start is all kernel serving and no compute; `write(path, n,
cuda=True)` the same of CUDA kernels, on the first GPU. Nothing here runs a workload or
writes a bundle.
"""

from __future__ import annotations

from pathlib import Path

TEMPLATE = '''"""Generated: {n} distinct tiny {what} kernels, each launched once."""

from warmcli import Kernel

DEVICE = "{device}"{device_note}
SOURCE = "{source}"
KERNELS = [Kernel(SOURCE, "touch", "Pi", defines={{"V": i}}{language}) for i in range({n})]


def workload(runtime):
    buffer = runtime.buffer(4, "int32")
    for kernel in KERNELS:
        runtime.launch(kernel, buffer, 1{launch})
    runtime.synchronize()
'''
BODY = "void touch(int *p, int n) { if (n < 0) p[0] = V; }"
HOST = {
    "what": "host",
    "device": "host",
    "device_note": "  # C kernels: the host, also where a GPU makes `--device auto` CUDA",
    "source": BODY,
    "language": "",
    "launch": "",
}
CUDA = {
    "what": "CUDA",
    "device": "cuda:0",
    "device_note": "",
    "source": 'extern \\"C\\" __global__ ' + BODY,
    "language": ', language="cuda"',
    "launch": ", grid=1, block=32",
}


def write(path: Path, n: int, cuda: bool = False) -> Path:
    """Write the `n`-kernel workload (of CUDA kernels if `cuda`) to `path`; returns `path`."""
    path.write_text(TEMPLATE.format(n=n, **(CUDA if cuda else HOST)))
    return path
