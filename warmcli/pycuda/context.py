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
only the fallback to the production runtime; its one state is that GPU's name, read once
(`~/.cuda_device` as a regular file alone, a few bytes of it: never waited on, never read whole).
"""

from __future__ import annotations

import functools
import os
import reprlib
from typing import TYPE_CHECKING

from warmcli import config, stamped
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


# The most of `~/.cuda_device` read: a GPU's number, with room for spaces and a newline.
FILED_BYTES = 64


@functools.cache  # read once, as PyCUDA's `autoinit` reads it (not a file read every launch)
def pycuda_device() -> str:
    """The GPU PyCUDA's `make_default_device` (its `autoinit`) takes: `CUDA_DEVICE`, else the
    number in `~/.cuda_device` (none to read: none), as `cuda:N`; else `cuda`, the first."""
    named = config.caller_values(("CUDA_DEVICE",))["CUDA_DEVICE"]
    home = config.user_home()
    if named is None and home:
        named = _filed(os.path.join(home, ".cuda_device"))
    if named is None:
        return "cuda"
    from warmcli.backends.cuda.arch import gpu_number

    index = gpu_number(named.strip())
    if index is None:
        raise DeviceError(  # (its start alone: a value of any length, one short line)
            f"CUDA_DEVICE (or ~/.cuda_device) is {reprlib.repr(named)}: PyCUDA takes the "
            "number of a GPU"
        )
    return f"cuda:{index}"


def _filed(path: str) -> str | None:
    """The text of the regular file at `path` (`DeviceError` past `FILED_BYTES`: no number
    is that long); None where there is none to read (missing, unreadable, not UTF-8, or a
    FIFO or a device, as PyCUDA finds none where its read fails: a FIFO never waited on for a
    writer, /dev/zero never read without end)."""
    found = stamped.opened(path)
    if found is None:
        return None
    with found[0] as file:
        try:
            data = file.read(FILED_BYTES + 1)
        except OSError:
            return None
    if len(data) > FILED_BYTES:
        raise DeviceError(
            f"~/.cuda_device holds over {FILED_BYTES} bytes: PyCUDA takes the number of a GPU"
        )
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None
