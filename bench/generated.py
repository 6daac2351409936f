"""Generated host workloads of N distinct kernels (rows `serve_per_kernel`, `hot_start`).

`write(path, n)` writes a workload file whose `workload(runtime)` launches `n`
tiny C kernels, each distinct (its own `V` define), once each on one small
buffer: a workload whose start is all kernel serving and no compute. Nothing
here runs a workload or writes a bundle.
"""

from __future__ import annotations

from pathlib import Path

TEMPLATE = '''"""Generated: {n} distinct tiny host kernels, each launched once."""

from warmcli import Kernel

DEVICE = "host"  # C kernels: the host, also where a GPU makes `--device auto` CUDA
SOURCE = "void touch(int *p, int n) {{ if (n < 0) p[0] = V; }}"
KERNELS = [Kernel(SOURCE, "touch", "Pi", defines={{"V": i}}) for i in range({n})]


def workload(runtime):
    buffer = runtime.buffer(4, "int32")
    for kernel in KERNELS:
        runtime.launch(kernel, buffer, 1)
    runtime.synchronize()
'''


def write(path: Path, n: int) -> Path:
    """Write the `n`-kernel workload to `path`; returns `path`."""
    path.write_text(TEMPLATE.format(n=n))
    return path
