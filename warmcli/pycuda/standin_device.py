"""The GPU-less stand-ins' device, contexts and versions: `pycuda.driver`'s, without a GPU.

Under `warm run --pycuda --arch sm_90` (`warmcli.pycuda.standins`), `drv.Device(0)` is the
compile-only device of the bound runtime: its compute capability and name are its arch's,
and its contexts (`retain_primary_context`, `make_context` with or without `ctx_flags`,
`pycuda.autoinit`'s) are the one warm launches in, whose `push`, `pop`, `detach` and
`synchronize` do nothing (nothing runs).
`get_version()` is, as PyCUDA's, the CUDA release of the toolkit kernels are built with
(here the NVRTC or nvcc of the bound device, which warm really builds with); a driver's
version (`get_driver_version`) or anything else only a GPU answers is never made up: a
one-line `DeviceError` naming the call and that there is no GPU. `PointerHolderBase` is
PyCUDA's class for a user's own device memory: a subclass defines `get_pointer()`, and its
int is that pointer (a kernel argument as PyCUDA takes one: `warmcli.pycuda.args`), a Python
int of 64 bits as PyCUDA converts it (anything else refused in one line, as PyCUDA's raises).
No state.
"""

from __future__ import annotations

from typing import Any

from warmcli.backends.base import DeviceError
from warmcli.kernel_parts import cuda_release
from warmcli.pool_tasks import note_refused
from warmcli.printable import cut
from warmcli.pycuda import context
from warmcli.pycuda.lacking import LackingClass, lacking
from warmcli.pycuda.module import PyCudaError


def no_gpu(what: str) -> DeviceError:
    """What only a GPU answers, asked of a stand-in: one line naming the call."""
    arch = context.current_runtime().arch
    error = DeviceError(f"{what} needs a GPU: compile-only for {arch} (warm run --arch), none here")
    return note_refused(error)  # made in a pool's task: the pass fails where that task ends by it


def get_version() -> tuple[int, int, int]:
    """PyCUDA's `get_version()`: the CUDA release it was built against, as (major, minor, 0);
    here the release of the compiler warm builds this run's kernels with."""
    compiler = context.current_runtime().device.compiler("cuda")
    found = cuda_release(compiler.toolchain.version)
    if found is None:
        raise PyCudaError(
            f"pycuda.driver.get_version(): the CUDA release of {compiler.toolchain.version!r} "
            "is not known"
        )
    return found[0], found[1], 0


def get_driver_version() -> int:
    """PyCUDA's `get_driver_version()` asks the driver (cuDriverGetVersion): none here."""
    raise no_gpu("pycuda.driver.get_driver_version()")


def _no_op(*_: Any, **__: Any) -> None:
    return None


class PointerHolderBase:
    """`drv.PointerHolderBase`: device memory a user's subclass holds, whose `get_pointer()`
    gives its address; `int()` of it (and `__index__`, as a prepared call packs it) is that
    address, as PyCUDA's."""

    def get_pointer(self) -> int:
        raise PyCudaError(
            f"{type(self).__name__}.get_pointer(): PointerHolderBase's is pure virtual: a "
            "subclass defines it"
        )

    def __int__(self) -> int:
        pointer = self.get_pointer()  # PyCUDA's CUdeviceptr: a Python int of 64 bits
        if not isinstance(pointer, int) or not 0 <= pointer < 2**64:
            raise PyCudaError(
                f"{type(self).__name__}.get_pointer() gave {_gave(pointer)}: PyCUDA takes a Python "
                "int from 0 to 2**64 - 1 (a CUdeviceptr; a float or a numpy integer is its "
                "TypeError, another int its OverflowError)"
            )
        return int(pointer)

    __index__ = __int__

    def as_buffer(self, size: int, offset: int = 0) -> Any:
        raise no_gpu(f"{type(self).__name__}.as_buffer()")


def _gave(value: object) -> str:
    """A wrong pointer as said: an int past 2**128 by its size (`repr` of one of 4,300 digits
    raises), anything else by its `repr`, cut (a `repr` that raises: its type)."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"{'a negative' if value < 0 else 'an'} int of {value.bit_length()} bits"
    try:
        return cut(repr(value), 200)
    except Exception:
        return f"a {type(value).__name__}"


class ctx_flags:
    """`drv.ctx_flags`: `make_context`'s flags, cuda.h's `CUctx_flags` values."""

    SCHED_AUTO, SCHED_SPIN, SCHED_YIELD, SCHED_MASK = 0x00, 0x01, 0x02, 0x07
    SCHED_BLOCKING_SYNC = BLOCKING_SYNC = 0x04
    MAP_HOST, LMEM_RESIZE_TO_MAX, FLAGS_MASK = 0x08, 0x10, 0xFF


class _Device(metaclass=LackingClass):
    def __init__(self, number: int = 0) -> None:
        self.number = number

    @staticmethod
    def count() -> int:
        return 1

    def compute_capability(self) -> tuple[int, int]:
        arch = context.current_runtime().arch.removeprefix("sm_").rstrip("af")
        return int(arch[:-1]), int(arch[-1])

    def name(self) -> str:
        return f"compile-only {context.current_runtime().arch}"

    def retain_primary_context(self) -> _Context:
        """The primary context: the one warm launches in."""
        return _Context()

    def make_context(self, flags: int = 0) -> _Context:
        """PyCUDA's makes a context of its own, current on the thread; warm launches in
        the primary context, so here it is that (nothing runs either way)."""
        if not isinstance(flags, int) or isinstance(flags, bool) or flags < 0:
            raise PyCudaError(f"Device.make_context({flags!r}): PyCUDA's takes an int of flags")
        return _Context()

    def __getattr__(self, name: str) -> Any:
        return lacking("pycuda.driver.Device", name)


class _Context(metaclass=LackingClass):
    synchronize = pop = staticmethod(_no_op)
    push = detach = _no_op

    @staticmethod
    def get_device() -> _Device:
        return _Device()

    def __getattr__(self, name: str) -> Any:
        return lacking("pycuda.driver.Context", name)
