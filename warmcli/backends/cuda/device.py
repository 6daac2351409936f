"""The CUDA device on PyCUDA: primary context, cubin modules, prepared launches, event timing.

A `CudaDevice` is one GPU (`cuda:N`). It retains the device's primary context (shared with torch or
numba; never `pycuda.autoinit`'s own) and makes it current only for the span of each call, popping
it in a `finally` (none is left pushed on any thread). It frees the modules, streams and
allocations it made in `close()`. Before loading a cubin it checks the cubin's SM against the
device's compute capability (a clear error, not CUDA_ERROR_NO_BINARY_FOR_GPU); PTX (served to a GPU
newer than every cubin) is checked against the GPU and the driver's CUDA version first, then
JIT-compiled by the driver as it loads. Timing records CUDA events on the legacy default stream,
ordered after every blocking stream's work (warm's are), dropped before the context is popped
(PyCUDA frees an event in its context, else pushes it on the retaining thread only). Its buffers are
of its own `CudaBuffer` subclass, holding the address a launch passes without a call (the
signature's fast path); freed, a plain `Buffer` again (refused by the full check). It imports
`pycuda.driver` inside functions only. Its one process state (`_Initialised`): whether this process
initialised CUDA, so a child forked after it is told CUDA is not for it.
"""

from __future__ import annotations

import contextlib
import os
import reprlib
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from warmcli.backends.base import (
    Buffer,
    DeviceError,
    DeviceFingerprint,
    LaunchConfig,
    LaunchError,
    Stream,
)
from warmcli.backends.cuda.arch import CompilerSlot, gpu_number, require_loadable, require_upload
from warmcli.backends.cuda.choose import CudaCompiler
from warmcli.backends.cuda.cubin import CubinError, cubin_sm
from warmcli.backends.cuda.ptx import is_ptx
from warmcli.backends.launch_args import converter
from warmcli.errors import message_of
from warmcli.kernel import Kernel

# PyCUDA packs arguments with its own copy of `struct`, which lacks `e` (and, in some
# versions, `?`): a bool goes as one byte, a half as its two bytes' bits.
PREPARE_LETTERS = str.maketrans({"?": "B", "e": "H"})
FINISH = {"?": int, "e": lambda v: int(np.float16(v).view(np.uint16))}
COPY_PIECE = 1 << 30  # bytes per device-to-device copy call


class _Initialised:
    """Whether this process initialised the CUDA driver (`cuInit`, which starts threads of
    its own), and whether it is a child forked after that: CUDA does not survive a fork,
    and `cuInit` in such a child can crash it (seen on the H200: a child's `runtime()`
    probing for a GPU died of SIGSEGV)."""

    here = False
    forked_after = False


def _forked() -> None:
    _Initialised.forked_after = _Initialised.forked_after or _Initialised.here


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def _driver() -> Any:
    """`pycuda.driver`, initialised; DeviceError when pycuda, libcuda or a GPU is missing, or
    in a child forked after this process's parent initialised CUDA."""
    if _Initialised.forked_after:
        raise DeviceError(
            "CUDA cannot be used in a process forked after its parent initialised CUDA: start "
            "workers with multiprocessing's 'spawn' start method"
        )
    try:
        with warnings.catch_warnings():  # pycuda warns before it raises: the error says it
            warnings.simplefilter("ignore")
            import pycuda.driver as cuda
    except Exception as exc:  # (ImportError, OSError: no libcuda; another: a broken pycuda)
        plain = isinstance(exc, ImportError | OSError)
        why = message_of(exc) if plain else f"{type(exc).__name__}: {message_of(exc)}"
        raise DeviceError(
            f"CUDA devices need pycuda and an NVIDIA driver ({why}): pip install 'warmcli[cuda]'"
        ) from exc
    _Initialised.here = True  # a failed cuInit may have started the driver's threads too
    try:
        cuda.init()
    except Exception as exc:  # (its `cuda.Error`; another: a broken pycuda, said as such)
        known = isinstance(exc, getattr(cuda, "Error", ()))
        why = message_of(exc) if known else f"{type(exc).__name__}: {message_of(exc)}"
        raise DeviceError(f"the CUDA driver did not initialise: {why}") from exc
    return cuda


def why_no_cuda_device() -> str:
    """Why `list_cuda_devices()` is empty, in pycuda's or the driver's own words."""
    try:
        _driver()
    except DeviceError as exc:
        return str(exc)
    return "the CUDA driver sees no GPU"


def _driver_version(cuda: Any) -> str:
    version = int(cuda.get_driver_version())
    return f"{version // 1000}.{version % 1000 // 10}"


def pycuda_stands_in() -> bool:
    """Whether the `pycuda` imported is `warm run --pycuda --arch`'s GPU-less stand-in
    (`warmcli.pycuda.standins`, marked so), which has no driver and no GPU."""
    return getattr(sys.modules.get("pycuda"), "__warm_stand_in__", False) is True


def list_cuda_devices() -> list[dict[str, Any]]:
    """Every visible GPU as a dict; [] when pycuda, libcuda or a device is missing."""
    try:
        cuda = _driver()
    except DeviceError:
        return []
    if pycuda_stands_in():  # `warm run --pycuda --arch`'s: no GPU
        return []
    try:
        driver = _driver_version(cuda)
        found = []
        for index in range(cuda.Device.count()):
            dev = cuda.Device(index)
            major, minor = dev.compute_capability()
            found.append(
                {
                    "index": index,
                    "id": f"cuda:{index}",
                    "name": dev.name(),
                    "compute_capability": f"{major}.{minor}",
                    "arch": f"sm_{major}{minor}",
                    "total_memory": int(dev.total_memory()),
                    "driver_version": driver,
                }
            )
        return found
    except cuda.Error:
        return []


def open_cuda_devices(
    spec: str, nvcc: str | None = None, *, compiler: str | None = None, first: bool = False
) -> list[CudaDevice]:
    """`cuda` opens every GPU (the first alone where `first`), `cuda:N` the N-th one."""
    if spec == "cuda":
        if not (count := len(list_cuda_devices())):
            raise DeviceError(f"no CUDA device found: {why_no_cuda_device()}")
        return [CudaDevice(i, nvcc, compiler=compiler) for i in range(1 if first else count)]
    index = gpu_number(spec[len("cuda:") :]) if spec.startswith("cuda:") else None
    if index is None:
        raise DeviceError(f"{reprlib.repr(spec)} is not a CUDA device: use 'cuda' or 'cuda:N'")
    return [CudaDevice(index, nvcc, compiler=compiler)]


class CudaStream(Stream):
    """A stream with a PyCUDA stream behind it."""

    def __init__(self, device: CudaDevice, handle: Any) -> None:
        super().__init__(device.id)
        self.handle = handle
        self._device = device

    def synchronize(self) -> None:
        with self._device.active():
            self.handle.synchronize()


class CudaBuffer(Buffer):
    """Live memory of one `CudaDevice` (each device makes its own subclass, so a launch's
    fast path, a type test, knows the device); `address` is read once, at allocation."""

    address: int


def _freed(buffer: Buffer) -> None:
    """`buffer` no longer live: no handle, and a plain `Buffer` (off every fast path)."""
    buffer.handle = None
    buffer.__class__ = Buffer


class CudaDevice:
    """One GPU through PyCUDA; see the module doc."""

    backend = "cuda"
    can_execute = True

    def __init__(
        self, index: int = 0, nvcc: str | None = None, *, compiler: str | None = None
    ) -> None:
        cuda = _driver()
        try:
            count = cuda.Device.count()
            if not 0 <= index < count:
                raise DeviceError(f"cuda:{index} does not exist: {count} CUDA device(s) here")
            self._dev = cuda.Device(index)
            self.capability: tuple[int, int] = tuple(self._dev.compute_capability())
            self.name = str(self._dev.name())
            self._driver = _driver_version(cuda)
            self._context: Any = self._dev.retain_primary_context()
        except cuda.Error as exc:
            raise DeviceError(f"cannot open cuda:{index}: {exc}") from exc
        self._cuda, self.index, self.id = cuda, index, f"cuda:{index}"
        self.arch = f"sm_{self.capability[0]}{self.capability[1]}"
        self.compilers = CompilerSlot(self.id, self.arch, nvcc, compiler)
        self._buffers: list[Buffer] = []
        self._buffer_type = type("CudaBuffer", (CudaBuffer,), {})  # this device's own
        self._modules: list[Any] = []
        self._streams: list[Any] = []

    @property
    def fingerprint(self) -> DeviceFingerprint:
        return DeviceFingerprint("cuda", self.name, self.arch, self._driver)

    def compiler(self, language: str) -> CudaCompiler:
        return self.compilers.get(language)

    def _push(self) -> Any:
        """The primary context made current on this thread (the caller pops it); `pycuda.driver`."""
        if self._context is None:
            raise DeviceError(
                f"{self.id} is closed: use_bundle() (or the process's exit) closed the runtime "
                "it belongs to, and its buffers; ask warmcli.runtime() again for one"
            )
        self._context.push()
        return self._cuda

    @contextlib.contextmanager
    def active(self) -> Iterator[Any]:
        """The primary context current on this thread for the block; `pycuda.driver` inside."""
        cuda = self._push()
        try:
            yield cuda
        finally:
            cuda.Context.pop()

    def _check_arch(self, binary: bytes) -> None:
        try:
            sm = cubin_sm(binary)
        except CubinError as exc:
            raise DeviceError(f"{self.id} cannot load this binary: {exc}") from exc
        major, minor = self.capability
        if sm // 10 != major or sm % 10 > minor:
            raise DeviceError(
                f"cubin is for sm_{sm} but {self.id} ({self.name}) is {self.arch}: "
                f"build it with --arch {self.arch}"
            )

    def load_module(self, binary: bytes, sha256: str | None = None) -> Any:
        if is_ptx(binary):  # JIT by the driver: checked against this GPU and its driver first
            binary = require_loadable(self.id, binary, self.arch, self._driver) + b"\0"
        else:
            self._check_arch(binary)
        with self.active() as cuda:
            try:
                module = cuda.module_from_buffer(binary)
            except cuda.Error as exc:
                raise DeviceError(f"{self.id} could not load a module: {exc}") from exc
        self._modules.append(module)
        return module

    def get_function(self, module: Any, symbol: str, kernel: Kernel) -> Any:
        with self.active() as cuda:
            try:
                function = module.get_function(symbol)
            except cuda.Error as exc:
                raise DeviceError(f"{kernel.label}: no {symbol} in its module: {exc}") from exc
            function.prepare(kernel.params.translate(PREPARE_LETTERS))
        fast = (self._buffer_type, "address")
        function.warm_convert = converter(kernel, self.id, self._address, FINISH, fast)
        return function

    def _address(self, value: Any) -> int | None:
        """A `P` argument's device address: live memory of this device, else None."""
        if isinstance(value, Buffer) and value.device_id == self.id and value.handle is not None:
            return int(value.handle)
        return None

    def launch(
        self,
        function: Any,
        kernel: Kernel,
        args: Sequence[Any],
        config: LaunchConfig,
        stream: Stream,
    ) -> None:
        values = function.warm_convert(args)
        handle = stream.handle if isinstance(stream, CudaStream) else None
        cuda = self._push()  # as `active()`, without a generator's cost on every launch
        try:
            function.prepared_async_call(
                config.grid, config.block, handle, *values, shared_size=config.shared
            )
        except cuda.Error as exc:
            raise LaunchError(f"{kernel.label} on {self.id}: {exc}") from exc
        finally:
            cuda.Context.pop()

    def allocate(self, shape: Sequence[int], dtype: str) -> Buffer:
        buffer = self._buffer_type(self.id, shape, dtype)
        with self.active() as cuda:
            buffer.handle = cuda.mem_alloc(max(buffer.nbytes, 1))
        buffer.address = int(buffer.handle)
        self._buffers.append(buffer)
        return buffer

    def _memory(self, buffer: Buffer) -> Any:
        if buffer.handle is None or buffer.device_id != self.id:
            raise DeviceError(f"{buffer} is not live memory on {self.id}")
        return buffer.handle

    def upload(self, buffer: Buffer, array: np.ndarray) -> None:
        data, memory = require_upload(buffer, array), self._memory(buffer)
        if data.nbytes:
            with self.active() as cuda:
                cuda.memcpy_htod(memory, data)

    def download(self, buffer: Buffer) -> np.ndarray:
        memory, out = self._memory(buffer), np.empty(buffer.shape, dtype=buffer.dtype)
        if out.nbytes:
            with self.active() as cuda:
                cuda.memcpy_dtoh(out, memory)
        return out

    def copy(self, dst: Buffer, src: Buffer, stream: Stream) -> None:
        """Device-to-device copy queued on `stream` (`cuMemcpyDtoDAsync`)."""
        if dst.nbytes != src.nbytes:
            raise DeviceError(f"copy of {src} into {dst}: sizes differ")
        target, source = int(self._memory(dst)), int(self._memory(src))
        if not dst.nbytes:
            return
        handle = stream.handle if isinstance(stream, CudaStream) else None
        with self.active() as cuda:
            try:  # PyCUDA takes the size as a C unsigned int: big buffers go in pieces
                for offset in range(0, dst.nbytes, COPY_PIECE):
                    size = min(COPY_PIECE, dst.nbytes - offset)
                    cuda.memcpy_dtod_async(target + offset, source + offset, size, handle)
            except cuda.Error as exc:
                raise DeviceError(f"copy of {src} into {dst} on {self.id}: {exc}") from exc

    def free(self, buffer: Buffer) -> None:
        """Free one buffer's memory now (it must not be in use by a pending operation)."""
        memory = self._memory(buffer)
        with self.active():
            memory.free()
        _freed(buffer)
        self._buffers = [b for b in self._buffers if b is not buffer]

    def new_stream(self) -> CudaStream:
        with self.active() as cuda:
            handle = cuda.Stream()
        self._streams.append(handle)
        return CudaStream(self, handle)

    def synchronize(self) -> None:  # every stream of the context (`cuCtxSynchronize`)
        with self.active() as cuda:
            cuda.Context.synchronize()

    def time(self, stream: Stream, run: Callable[[], None]) -> float:
        """Seconds between events around `run()` on the legacy default stream (None), not on
        `stream`: they cover what `run` enqueued on any blocking stream (a launch's own too)."""
        with self.active() as cuda:
            start, end = cuda.Event(), cuda.Event()
            try:
                start.record(None)
                run()
                end.record(None)
                end.synchronize()
                return float(start.time_till(end)) / 1000.0
            finally:  # destroyed while the context is current (see the module doc)
                del start, end

    def close(self) -> None:
        """Wait for the GPU, free what this device made, release the primary context."""
        if self._context is None:
            return
        with self.active() as cuda:
            with contextlib.suppress(cuda.Error):
                cuda.Context.synchronize()
            for buffer in self._buffers:
                with contextlib.suppress(cuda.Error):
                    buffer.handle.free()
                _freed(buffer)
            self._buffers.clear()
            self._modules.clear()
            self._streams.clear()
        self._context = None
        from pycuda.tools import clear_context_caches

        clear_context_caches()

    def __repr__(self) -> str:
        return f"CudaDevice({self.id}, {self.name}, {self.arch})"
