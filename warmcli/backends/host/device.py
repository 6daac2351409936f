"""The host device: loads shared objects, launches C kernels through ctypes, times with a clock.

Buffers are numpy arrays in host memory; a launch passes their data pointers and
the scalars, each checked against the kernel's parameter letters: by its signature's
fast path (`warmcli.backends.launch_args.fast_converter`, shared), and by the kernel's
own converter (made on the first launch that needs it) for any argument off that path;
a kernel's function is made from its signature's C function type, made once per
signature, and its symbol's address: ctypes never unloads a library (no `dlclose`), and
the device holds each it loaded, so no function holds its own (by name, ctypes would keep
its library in a dict of each function's: one tracked object more per served kernel for
Python's garbage collector to count and trace). A binary is loaded from the host
library cache (`warmcli.backends.host.libraries`: the loader needs a file, and a hot
start finds it already written).
A buffer's address is read once, when it is allocated (its array never
moves). Timing is `time.perf_counter` around the measured run: host launches
are synchronous, so the stream has nothing to wait for. This module never decides
whether a launch runs.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from warmcli.backends.base import Buffer, DeviceError, DeviceFingerprint, LaunchConfig, Stream
from warmcli.backends.host.compiler import HostCompiler
from warmcli.backends.host.libraries import LibraryCache
from warmcli.backends.launch_args import converter, fast_converter
from warmcli.kernel import CUDA_ONLY_LETTERS, PARAM_DTYPES, Kernel
from warmcli.once import once

if TYPE_CHECKING:
    from warmcli.backends.compiler import Compiler

# Each letter's ctypes type, by its numpy type's name (what `np.ctypeslib.as_ctypes_type`
# answers, without importing `numpy.ctypeslib`: c_int8 ... c_uint64 are ctypes' own names).
_NAMED = {"bool": ctypes.c_bool, "float32": ctypes.c_float, "float64": ctypes.c_double}
CTYPES: dict[str, type] = {
    "P": ctypes.c_void_p,
    **{
        letter: _NAMED.get(name) or getattr(ctypes, f"c_{name}")
        for letter, name in PARAM_DTYPES.items()
        if letter not in CUDA_ONLY_LETTERS
    },
}


# What `ctypes.CFUNCTYPE` makes a C function type of (its metaclass, base and flags).
_FUNCTION_TYPE, _FUNCTION_BASE = type(ctypes._CFuncPtr), ctypes._CFuncPtr
_CDECL = ctypes._FUNCFLAG_CDECL


@functools.lru_cache(maxsize=256)
def _prototype(params: str) -> Any:
    """The C function type of a signature (returning void), made once per signature: it
    holds the argument types and their converters, and the signature's fast path
    (`warm_fast`), so no kernel's function holds its own (a kernel's own checking
    converter, `warm_convert`, is set on its function only when an argument leaves that
    path). Made in one step, as `ctypes.CFUNCTYPE` makes its type of the signature plus
    these two names (not a subclass of that type: a second class costs a first launch
    tens of µs)."""
    held = {
        "_argtypes_": tuple(CTYPES[p] for p in params),
        "_restype_": None,
        "_flags_": _CDECL,
        "warm_fast": staticmethod(fast_converter(params, HostBuffer, "address")),
        "warm_convert": None,
    }
    return _FUNCTION_TYPE(f"HostFunction_{params}", (_FUNCTION_BASE,), held)


def cpu_name() -> str:
    """The CPU model as the kernel reports it, else the platform's processor string.

    The first CPU's block of `/proc/cpuinfo` names it, so one short read does: the
    kernel builds the file as it is read, and every further CPU's block costs time.
    """
    try:
        fd = os.open("/proc/cpuinfo", os.O_RDONLY)
        try:
            head = os.read(fd, 4096).decode(errors="replace")
        finally:
            os.close(fd)
    except OSError:
        head = ""
    for line in head.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


class HostBuffer(Buffer):
    """A host buffer: a numpy array that never moves, so its address is read once."""

    def __init__(self, device_id: str, shape: Sequence[int], dtype: str, array: np.ndarray) -> None:
        super().__init__(device_id, shape, dtype, array)
        # Its data pointer (what `array.ctypes.data` says, whose first use costs ~10 µs more).
        self.address: int = array.__array_interface__["data"][0]


def _address(value: Any) -> int | None:
    """A `P` argument's address: a host buffer's data pointer, else None (refused)."""
    return value.address if type(value) is HostBuffer else None


class HostDevice:
    """The machine's CPU as a warm device."""

    backend = "host"
    can_execute = True

    def __init__(self, cc: str | None = None) -> None:
        self.id = "host"
        self.arch = platform.machine() or "unknown"
        self._compiler = HostCompiler(cc)
        self._files = LibraryCache()
        self._libraries: list[ctypes.CDLL] = []

    @once
    def fingerprint(self) -> DeviceFingerprint:
        """Read once: every tune keys on it, and the CPU does not change under a process."""
        return DeviceFingerprint("host", cpu_name(), self.arch, platform.system().lower())

    def compiler(self, language: str) -> Compiler:
        if language != "c":
            raise DeviceError(
                f"the host device compiles C kernels, not {language!r} ones: launch them on a "
                f'{language} runtime (a workload\'s DEVICE = "{language}", or --device '
                f"{language}; without a GPU, --arch sm_90, which warm run and warm verify "
                "--workload take, builds and replays them)"
            )
        return self._compiler

    def load_module(self, binary: bytes, sha256: str | None = None) -> ctypes.CDLL:
        try:
            library = self._files.load(binary, sha256)
        except OSError as exc:
            raise DeviceError(f"cannot load host kernel binary: {exc}") from exc
        self._libraries.append(library)
        return library

    def get_function(self, module: ctypes.CDLL, symbol: str, kernel: Kernel) -> Any:
        try:  # by its address, not (symbol, module): no dict of its own (the module doc)
            address = ctypes.addressof(ctypes.c_char.in_dll(module, symbol))
        except ValueError as exc:
            raise DeviceError(f"binary has no symbol {symbol} for kernel {kernel.label}") from exc
        # Its signature's prototype holds the argument types and fast path, shared.
        return _prototype(kernel.params)(address)

    def launch(
        self,
        function: Any,
        kernel: Kernel,
        args: Sequence[Any],
        config: LaunchConfig,
        stream: Stream,
    ) -> None:
        passed = function.warm_fast(args)
        if passed is None:  # an argument off the fast path: the kernel's full check
            convert = function.warm_convert
            if convert is None:
                convert = function.warm_convert = converter(
                    kernel, self.id, _address, fast_buffer=(HostBuffer, "address")
                )
            passed = convert(args)
        function(*passed)

    def allocate(self, shape: Sequence[int], dtype: str) -> Buffer:
        return HostBuffer(self.id, shape, dtype, np.zeros(tuple(shape), dtype=dtype))

    def upload(self, buffer: Buffer, array: np.ndarray) -> None:
        if tuple(array.shape) != buffer.shape:
            raise DeviceError(f"upload of shape {array.shape} into {buffer}")
        np.copyto(buffer.handle, array, casting="same_kind")

    def download(self, buffer: Buffer) -> np.ndarray:
        return np.array(buffer.handle, copy=True)

    def copy(self, dst: Buffer, src: Buffer, stream: Stream) -> None:
        if dst.nbytes != src.nbytes:
            raise DeviceError(f"copy of {src} into {dst}: sizes differ")
        np.copyto(dst.handle, src.handle.reshape(dst.shape), casting="no")

    def free(self, buffer: Buffer) -> None:
        buffer.handle = None  # the array goes with its last reference

    def new_stream(self) -> Stream:
        return Stream(self.id)

    def synchronize(self) -> None:
        return None  # its launches and copies ran as they were issued

    def time(self, stream: Stream, run: Callable[[], None]) -> float:
        started = time.perf_counter()
        run()
        return time.perf_counter() - started

    def close(self) -> None:
        self._libraries.clear()
        self._files.close()
