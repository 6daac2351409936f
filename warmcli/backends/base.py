"""The one protocol every backend implements: a device that compiles, loads, launches and times.

A `Device` is one execution target (`host`, `cuda:0`, or a GPU-less `sm_90` that
only compiles). It knows its architecture, its fingerprint (what a tune key and a
bundle manifest record of it), its compiler per kernel language, and how to load
a binary, launch a kernel on a stream, allocate, copy, free and read buffers, wait for
every stream, and time a measurement on one stream. A `Stream` is an ordered queue of
launches that holds one bit, its `StreamMode` (an override, else the measuring thread's
`Execute` for every stream of its device while a tune measures, else the default that
`warmcli.execution.process_mode` installs with `set_default_stream_mode`), and, while
tunes measure on it, each measuring thread's hook for its launches (`on_launch`). It owns
the backend's handles; it never decides what a launch does (that is the
`LaunchMode` it is handed), imports nothing of `warmcli.execution`, and keeps no
cache of its own.
"""

from __future__ import annotations

import enum
import itertools
import math
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from warmcli.errors import DeviceError as DeviceError
from warmcli.errors import LaunchError as LaunchError
from warmcli.forking import new_lock, renew_on_fork
from warmcli.kernel import Kernel
from warmcli.kernel import dtype_name as dtype_name  # (launch_sizes reads it here)
from warmcli.records import Record

if TYPE_CHECKING:  # a compiler's module is imported where one compiles
    from warmcli.backends.compiler import Compiler


COMPILE_ONLY = "compile-only"  # the name in a GPU-less (`--arch`) device's fingerprint


class DeviceFingerprint(Record):
    """What identifies a device for tuning: a pick measured on one is not served on another."""

    backend: str
    name: str
    arch: str
    driver: str

    @property
    def identity(self) -> str:
        return f"{self.backend}|{self.name}|{self.arch}|{self.driver}"

    def as_dict(self) -> dict[str, str]:
        return {
            "backend": self.backend,
            "name": self.name,
            "arch": self.arch,
            "driver": self.driver,
        }


_SERIALS = itertools.count()  # the order buffers are made in (`Buffer.serial`)


def next_serial() -> int:
    """The serial the next buffer made will have, or a later one: buffers made from now on
    have one at least this."""
    return next(_SERIALS)


class Buffer:
    """Device memory of a shape and dtype; `handle` is the backend's (None when shape-only);
    `serial`, the order it was made in (a tune tells a launch function's own workspace,
    made while it ran, from the app's buffers)."""

    serial = -1  # one made without `__init__`: as if before any other
    owned = False  # its memory allocated for it by warm (`Runtime.buffer`, `upload`), no wrap

    def __init__(
        self, device_id: str, shape: Sequence[int], dtype: str, handle: Any = None
    ) -> None:
        self.serial = next(_SERIALS)
        self.device_id = device_id
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype_name(np.dtype(dtype))
        self.handle = handle

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    def __repr__(self) -> str:
        return f"Buffer({self.device_id}, shape={self.shape}, dtype={self.dtype})"


class StreamMode(enum.Enum):
    """Whether launches on a stream run."""

    EXECUTE = "Execute"
    DISCARD = "Discard"


_DISCARD, _EXECUTE = StreamMode.DISCARD, StreamMode.EXECUTE  # (a global read: no enum lookup)


def _execute() -> StreamMode:
    return StreamMode.EXECUTE


_default_mode: Callable[[], StreamMode] = _execute


def set_default_stream_mode(default: Callable[[], StreamMode]) -> None:
    """Where a stream with no override takes its mode from (`warmcli.execution.process_mode`
    installs the process mode's default when it is imported; until then, `Execute`)."""
    global _default_mode
    _default_mode = default


_stream_ids = itertools.count()
# .devices: device id -> how many measurements on this thread run every launch it issues on any
# stream of that device (`every_stream`): a launch function's own stream is the candidate's too
_thread = threading.local()


_every_lock = threading.Lock()  # around a change of `Stream.on_launch`, the class's
renew_on_fork(sys.modules[__name__], "_every_lock")


def _hooked(
    hooks: dict[int, Callable[[tuple[Any, ...]], None]] | None,
    cover: Callable[[tuple[Any, ...]], None] | None,
) -> tuple[dict[int, Callable[[tuple[Any, ...]], None]], Callable[[tuple[Any, ...]], None] | None]:
    """`hooks` copied with this thread's cover set to `cover` (None: removed); the one replaced."""
    hooks = dict(hooks or {})
    previous = hooks.pop(threading.get_ident(), None)
    if cover is not None:
        hooks[threading.get_ident()] = cover
    return hooks, previous


def every_stream(device_id: str, more: int) -> None:
    """From now (`more` 1), or no longer (-1), this thread's launches on every stream of the
    device execute where the process mode would discard them (`Stream.mode`); nested, counted."""
    devices: dict[str, int] = _thread.__dict__.setdefault("devices", {})
    devices[device_id] = devices.get(device_id, 0) + more
    if devices[device_id] <= 0:
        del devices[device_id]


class Stream:
    """An ordered queue of launches on one device; backends subclass it for their handle.

    It holds one bit: its `StreamMode`, the override in force (pushed and popped by
    `warmcli.execution.stream_mode.StreamModeOverride`), else `Execute` for the thread a
    measurement switched every stream of the device to `Execute` for (`every_stream`), else
    the default installed with `set_default_stream_mode`. The stream never knows why. While a
    tune measures on it, `on_launch` holds, for the measuring thread, what is shown each launch
    that thread executes on it first (`watch_launches`; the runtime calls it); a stream no tune
    measures on has the class's, the measuring threads' for every stream (`watch_every`), which
    the runtime reads too for a thread with none on a stream another thread's tune measures on.
    """

    # thread id -> what is shown its executed launches' arguments (copied on write, so a
    # launch reads it without the lock); the class's (every stream's, `watch_every`) while no
    # tune measures on this stream: None while no tune measures at all (serving)
    on_launch: dict[int, Callable[[tuple[Any, ...]], None]] | None = None

    def __init__(self, device_id: str) -> None:
        self.device_id = device_id
        self.id = next(_stream_ids)
        self._overrides: list[StreamMode] = []
        self._lock = new_lock(self)

    def watch_launches(
        self, cover: Callable[[tuple[Any, ...]], None] | None
    ) -> Callable[[tuple[Any, ...]], None] | None:
        """From now, `cover` is shown the arguments of each launch this thread executes on
        the stream, before it runs (None: no longer); other threads' launches are theirs.
        Returns the cover it replaces (a tune measuring inside another's candidate hands
        the outer one back when it is done)."""
        with self._lock:
            hooks, previous = _hooked(self.__dict__.get("on_launch"), cover)
            if hooks:
                self.on_launch = hooks
            else:  # every stream's again (the class's)
                self.__dict__.pop("on_launch", None)
        return previous

    @staticmethod
    def watch_every(
        cover: Callable[[tuple[Any, ...]], None] | None,
    ) -> Callable[[tuple[Any, ...]], None] | None:
        """`watch_launches` on every stream no tune measures on (a launch function's own, one
        of another device too: `cover` takes its device's buffers only); the cover replaced."""
        with _every_lock:
            hooks, previous = _hooked(Stream.on_launch, cover)
            Stream.on_launch = hooks or None
        return previous

    @staticmethod
    def every_cover(hooks: dict[int, Any]) -> Callable[[tuple[Any, ...]], None] | None:
        """This thread's cover for every stream (`watch_every`), where a stream's own `hooks`
        (another thread's tune measures on it) have none of this thread's."""
        every = Stream.on_launch
        return None if every is None or every is hooks else every.get(threading.get_ident())

    @property
    def mode(self) -> StreamMode:
        """The override in force, else the default from the process mode.

        Read on every launch, so it takes no lock: pushes and pops hold the lock, and
        a read that races a pop of the last override sees the default it falls back to.
        The thread's `every_stream` is read only over a discarding default (a warming pass):
        where the default executes (serving) it changes nothing, and costs nothing.
        """
        overrides = self._overrides
        if overrides:
            try:
                return overrides[-1]
            except IndexError:
                pass
        default = _default_mode()
        if default is _DISCARD and self.device_id in _thread.__dict__.get("devices", ()):
            return _EXECUTE  # a measured candidate's launch, on a stream of its own
        return default

    def _push(self, mode: StreamMode) -> None:
        with self._lock:
            self._overrides.append(mode)

    def _pop(self) -> None:
        with self._lock:
            self._overrides.pop()

    def synchronize(self) -> None:
        """Wait for the stream's launches; a host stream runs them synchronously."""

    def __repr__(self) -> str:
        return f"Stream({self.device_id}#{self.id}, {self.mode.value})"


class LaunchConfig(Record):
    """Grid, block and dynamic shared memory of one launch (the host ignores them)."""

    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (1, 1, 1)
    shared: int = 0


@runtime_checkable
class Device(Protocol):
    """One execution target; see the module doc."""

    id: str
    backend: str
    arch: str
    can_execute: bool

    @property
    def fingerprint(self) -> DeviceFingerprint: ...

    def compiler(self, language: str) -> Compiler: ...

    def load_module(self, binary: bytes, sha256: str | None = None) -> Any:
        """The binary, loaded (`sha256`: its digest, when its caller checked it already)."""
        ...

    def get_function(self, module: Any, symbol: str, kernel: Kernel) -> Any: ...

    def launch(
        self,
        function: Any,
        kernel: Kernel,
        args: Sequence[Any],
        config: LaunchConfig,
        stream: Stream,
    ) -> None: ...

    def allocate(self, shape: Sequence[int], dtype: str) -> Buffer: ...

    def upload(self, buffer: Buffer, array: np.ndarray) -> None: ...

    def download(self, buffer: Buffer) -> np.ndarray: ...

    def copy(self, dst: Buffer, src: Buffer, stream: Stream) -> None:
        """Copy `src` into `dst` (same size) on the device, queued on `stream`."""
        ...

    def free(self, buffer: Buffer) -> None:
        """Release a buffer's memory now, not at `close`; the buffer is unusable after."""
        ...

    def new_stream(self) -> Stream: ...

    def synchronize(self) -> None:
        """Wait for everything queued on every stream of the device (a launch function's
        own too); a host device runs its launches synchronously."""
        ...

    def time(self, stream: Stream, run: Callable[[], None]) -> float: ...

    def close(self) -> None: ...
