"""Which warm runtime a PyCUDA-style launch goes through, and on which stream.

PyCUDA code names no runtime: `f(a, b, block=..., grid=...)` launches in "the current
context". warm's equivalent is the *bound* runtime: a workload's passes bind the
runtime they run it on (`Workload.run`), and a PyCUDA-style launch anywhere below
goes through it. With nothing bound (a production process), it is the process's
runtime over its bundle of the GPU PyCUDA's `autoinit` would take (`pycuda_device`:
`CUDA_DEVICE`, else `~/.cuda_device`, else the first, `warmcli.runtime("cuda")`). While a
runtime is bound, the primary context of its CUDA device is current on the thread, so the
user's own `drv.mem_alloc` and copies share memory with warm's launches. A tune measuring a
candidate names the stream its launches go out on (`launch_stream`). The binding and
the stream slots are `warmcli.runtime.binding`'s (re-exported here); this module adds
only the fallback to the production runtime; its one state is that GPU's name, read once.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import TYPE_CHECKING

from warmcli import config
from warmcli.errors import DeviceError
from warmcli.runtime.binding import bound, bound_runtime, default_stream, launch_stream

if TYPE_CHECKING:
    from warmcli.runtime.runtime import Runtime

__all__ = ["bound_runtime", "current_runtime", "default_stream", "launch_stream"]


def current_runtime() -> Runtime:
    """The bound runtime, else the production runtime of PyCUDA's default GPU over the bundle."""
    runtime = bound()
    if runtime is not None:
        return runtime
    from warmcli.production import runtime as production_runtime

    return production_runtime(pycuda_device())


@functools.cache  # read once, as PyCUDA's `autoinit` reads it (not a file read every launch)
def pycuda_device() -> str:
    """The GPU PyCUDA's `make_default_device` (its `autoinit`) takes: `CUDA_DEVICE`, else the
    number in `~/.cuda_device` (unreadable: none), as `cuda:N`; else `cuda`, the first."""
    named = config.caller_values(("CUDA_DEVICE",))["CUDA_DEVICE"]
    home = config.user_home()
    if named is None and home:
        with contextlib.suppress(OSError, ValueError):
            named = Path(home, ".cuda_device").read_text()
    if named is None:
        return "cuda"
    number = named.strip()
    if not (number.isascii() and number.isdigit()):
        raise DeviceError(
            f"CUDA_DEVICE (or ~/.cuda_device) is {named!r}: PyCUDA takes the number of a GPU"
        )
    return f"cuda:{int(number)}"
