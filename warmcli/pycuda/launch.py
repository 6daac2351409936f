"""How one PyCUDA-style launch reaches the device: its stream, and its copied arrays.

A launch names a warm `Stream`, a PyCUDA stream (wrapped once in a warm `CudaStream`
on the runtime's GPU; a GPU-less stand-in's holds warm's own) or none (the bound stream,
else the runtime's default). An
executing launch with `drv.In`/`Out`/`InOut` arguments gets device memory for each
array for the span of the launch: copied in before, the stream synchronised and
copied back after, then freed, as PyCUDA does (the array's bytes as they lie, a
Fortran-ordered one's too; an array of records as its numbers or bytes). `pycuda_sizes`
holds a launch's grid, block and shared size to what PyCUDA's launch takes. The module
owns the map from PyCUDA streams to warm's; it decides no verdict (its caller did).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from warmcli.backends.base import Buffer, Stream
from warmcli.backends.cuda.foreign import held_view, numbers_of
from warmcli.errors import PyCudaError
from warmcli.pycuda import context
from warmcli.pycuda.args import ArgumentError, Staged

if TYPE_CHECKING:
    from warmcli.runtime.runtime import Runtime

_streams: dict[int, tuple[Any, Stream]] = {}  # id(PyCUDA stream) -> (it, warm's stream)


def warm_stream(rt: Runtime, stream: Any) -> Stream:
    """The warm stream a launch goes out on: warm's own, or one around a PyCUDA stream."""
    if stream is None:
        return context.default_stream(rt)
    if isinstance(stream, Stream):
        return stream
    inner = getattr(stream, "__warm_stream__", None)  # a GPU-less stand-in's `drv.Stream()`
    if isinstance(inner, Stream):
        return inner
    from warmcli.backends.cuda.device import CudaDevice, CudaStream

    if not isinstance(rt.device, CudaDevice):
        raise ArgumentError(f"a {type(stream).__name__} stream on {rt.device.id}, which has no GPU")
    known = _streams.get(id(stream))
    if known is None or known[0] is not stream or known[1].device_id != rt.device.id:
        if len(_streams) > 256:
            _streams.clear()
        known = _streams[id(stream)] = (stream, CudaStream(rt.device, stream))
    return known[1]


def _ints(value: Any, most: int) -> bool:
    return (
        isinstance(value, tuple) and len(value) <= most and all(isinstance(d, int) for d in value)
    )


def pycuda_sizes(call: str, grid: Any, block: Any, shared: Any, shaped: bool = True) -> Any:
    """The grid to launch (PyCUDA's `()` is one block), once the sizes are ones PyCUDA's
    launch takes: its C++ `_launch_kernel(py::tuple grid, py::tuple block, ..., unsigned
    shared)` and, first where `shaped` (all but `prepared_timed_call`, whose block goes to
    `_launch_kernel` as it is: up to three sizes), `_set_block_shape(int x, int y, int z)`,
    under Boost.Python, whose int converter takes a Python int only. A list, a bare int, a
    numpy integer or a shaped block of fewer than three sizes is an ArgumentError there (a
    prepared call's block that is no tuple is the first argument of its pre-2011 form):
    refused, named, never launched."""
    sizes = 3 if shaped else min(len(block), 3) if type(block) is tuple else -1
    if type(block) is tuple and type(grid) is tuple and type(shared) is int and len(block) == sizes:
        for d in (*block, *grid):  # the usual launch: Python ints, checked at once
            if type(d) is not int:
                break
        else:
            if len(grid) <= 3 and shared >= 0:
                return grid or (1,)
    shared_name = "shared" if call.endswith("(...)") else "shared_size"
    kinds = "three Python ints" if shaped else "up to three Python ints"
    for name, value, ok, takes in (
        ("block", block, _ints(block, 3) and len(block) >= 3 * shaped, f"a tuple of {kinds}"),
        ("grid", grid, _ints(grid, 3), "a tuple of up to three Python ints"),
        (shared_name, shared, isinstance(shared, int), "a Python int"),
    ):
        if not ok:
            raise PyCudaError(
                f"{call}: its {name}, {type(value).__name__} {value!r:.40}, is no {name} size: "
                f"PyCUDA's launch takes {takes} (its Boost.Python binding refuses a list, a "
                "numpy integer, fewer block sizes): e.g. block=(int(n), 1, 1), grid=(int(g), 1)"
            )
    return grid or (1,)


def run_staged(
    rt: Runtime,
    stream: Stream,
    handlers: dict[int, Staged],
    values: list[Any],
    launch: Callable[[list[Any]], None],
    timed: bool,
) -> float | None:
    """An executing launch with `drv.In`/`Out` arguments: device memory for each, copied in
    before and back after the launch (the stream synchronised first), then freed."""
    device = rt.device
    active = getattr(device, "active", None)
    staged = list(values)
    memory: dict[int, Any] = {}
    try:
        if active is None:  # a device of warm's own buffers (no pointers to hand out)
            for i, h in handlers.items():
                flat = held_view(h.array)  # its bytes as they lie, as PyCUDA's copies
                memory[i] = staged[i] = (  # (a Fortran-ordered one's, a record array's too)
                    rt.upload(flat) if h.copies_in else rt.buffer(flat.shape, flat.dtype.name)
                )
        else:
            with active() as cuda:
                for i, h in handlers.items():
                    memory[i] = cuda.mem_alloc(max(h.array.nbytes, 1))
                    if h.copies_in and h.array.nbytes:
                        cuda.memcpy_htod(memory[i], h.array)
                    held = numbers_of(h.array.shape, h.array.dtype)  # records: numbers
                    staged[i] = Buffer(device.id, *held, int(memory[i]))
        if timed:
            seconds: float | None = device.time(stream, lambda: launch(staged))
        else:
            launch(staged)
            seconds = None
        stream.synchronize()
        for i, h in handlers.items():
            if not h.copies_out or not h.array.nbytes:
                continue
            if active is None:
                view = held_view(h.array)
                view[...] = device.download(memory[i]).reshape(view.shape)
            else:
                with active() as cuda:
                    cuda.memcpy_dtoh(h.array, memory[i])
        return seconds
    finally:
        if active is not None and memory:
            with active():
                for allocation in memory.values():
                    allocation.free()
