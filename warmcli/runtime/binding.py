"""Which runtime is bound to the work running now, and which stream its launches take.

A workload's passes bind the runtime they run it on (`bound_runtime`), and code below
that names no runtime (a PyCUDA-style launch, `warmcli.pycuda.context`) goes through
the innermost bound one (`bound`). While a runtime is bound, the primary context of
its CUDA device is current on the thread, so the caller's own allocations share
memory with warm's launches. A tune measuring a candidate names the stream its
launches go out on (`launch_stream`, per thread). A pass also names who provides the
runtime of another device its workload asks for (`warmcli.runtime("host")` in a pass on
`sm_90`: `companions`, `companion`), so that one is warmed too. The module owns those
three slots (a stack each) and nothing else: it never opens a runtime itself (the
fallback to the production runtime is `warmcli.pycuda.context`'s and
`warmcli.production`'s) and never launches.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from warmcli.forking import renew_on_fork

if TYPE_CHECKING:
    from warmcli.backends.base import Stream
    from warmcli.runtime.runtime import Runtime

_lock = threading.Lock()
renew_on_fork(sys.modules[__name__])
_runtimes: list[Runtime] = []
_local = threading.local()
Provider = Callable[[str], "Runtime | None"]  # a device's name -> the pass's runtime of it
_providers: list[Provider] = []


@contextlib.contextmanager
def bound_runtime(runtime: Runtime) -> Iterator[Runtime]:
    """Launches that name no runtime go through `runtime` in the block; its device's
    context is current on this thread for the block when it has one."""
    active: Any = getattr(getattr(runtime, "device", None), "active", None)
    with _lock:
        _runtimes.append(runtime)
    try:
        with active() if callable(active) else contextlib.nullcontext():
            yield runtime
    finally:
        with _lock:
            _runtimes.remove(runtime)


def bound() -> Runtime | None:
    """The innermost bound runtime, or None when none is bound."""
    with _lock:
        return _runtimes[-1] if _runtimes else None


@contextlib.contextmanager
def companions(provide: Provider) -> Iterator[None]:
    """In the block, `companion(device)` asks `provide` for the runtime of a device the
    bound runtime is not (None: not one it warms)."""
    with _lock:
        _providers.append(provide)
    try:
        yield
    finally:
        with _lock:
            _providers.remove(provide)


def companion(device: str) -> Runtime | None:
    """The innermost provider's runtime for `device`, or None (no provider, or none it
    gives for that device)."""
    with _lock:
        provide = _providers[-1] if _providers else None
    return provide(device) if provide is not None else None


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
