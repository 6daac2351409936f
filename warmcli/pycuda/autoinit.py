"""`import warmcli.pycuda.autoinit`: PyCUDA's `autoinit`, on the context warm launches in.

`pycuda.autoinit` makes a context of its own, and memory allocated in it cannot be
used by kernels warm launches in the device's primary context (the one torch and
CuPy share). This module makes the primary context of the process's warm runtime (over the
bundle in use) of the GPU `pycuda.autoinit` takes (`CUDA_DEVICE`, else `~/.cuda_device`, else
the first: `warmcli.pycuda.context.pycuda_device`) current on the importing thread until exit,
and names it `context`, its device `device`, as `pycuda.autoinit` does.
"""

from __future__ import annotations

import atexit
from typing import Any

from warmcli.pycuda.context import current_runtime

_device: Any = current_runtime().device
context: Any = _device._context
device: Any = _device._dev
context.push()


def _pop() -> None:
    import pycuda.driver as cuda

    cuda.Context.pop()


atexit.register(_pop)
