"""Which warm runtime a PyCUDA-style launch goes through, and on which stream.

PyCUDA code names no runtime: `f(a, b, block=..., grid=...)` launches in "the current
context". warm's equivalent is the *bound* runtime: a workload's passes bind the
runtime they run it on (`Workload.run`), and a PyCUDA-style launch anywhere below
goes through it. With nothing bound (a production process), it is the process's
runtime over its bundle (`warmcli.runtime("cuda")`). While a runtime is bound, the
primary context of its CUDA device is current on the thread, so the user's own
`drv.mem_alloc` and copies share memory with warm's launches. A tune measuring a
candidate names the stream its launches go out on (`launch_stream`). The module owns
those two process-wide slots (a stack each) and nothing else.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from warmcli.backends.base import Stream
    from warmcli.runtime.runtime import Runtime

_lock = threading.Lock()
_runtimes: list[Runtime] = []
_local = threading.local()


@contextlib.contextmanager
def bound_runtime(runtime: Runtime) -> Iterator[Runtime]:
    """PyCUDA-style launches in the block go through `runtime`; its device's context is
    current on this thread for the block when it has one."""
    active: Any = getattr(getattr(runtime, "device", None), "active", None)
    with _lock:
        _runtimes.append(runtime)
    try:
        with active() if callable(active) else contextlib.nullcontext():
            yield runtime
    finally:
        with _lock:
            _runtimes.remove(runtime)


def current_runtime() -> Runtime:
    """The bound runtime, else the production runtime of the first GPU over the bundle."""
    with _lock:
        if _runtimes:
            return _runtimes[-1]
    from warmcli.production import runtime

    return runtime("cuda")


@contextlib.contextmanager
def launch_stream(stream: Stream) -> Iterator[Stream]:
    """Launches that name no stream go out on `stream` in the block (this thread)."""
    stack: list[Stream] = _local.__dict__.setdefault("streams", [])
    stack.append(stream)
    try:
        yield stream
    finally:
        stack.pop()


def default_stream(runtime: Runtime) -> Stream:
    """The stream a launch that names none goes out on."""
    stack = getattr(_local, "streams", None)
    return stack[-1] if stack else runtime.default_stream
