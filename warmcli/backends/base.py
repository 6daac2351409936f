"""The one protocol every backend implements: a device that compiles, loads, launches and times.

A `Device` is one execution target (`host`, `cuda:0`, or a GPU-less `sm_90` that
only compiles). It knows its architecture, its fingerprint (what a tune key and a
bundle manifest record of it), its compiler per kernel language, and how to load
a binary, launch a kernel on a stream, allocate, copy, free and read buffers, and time a
measurement on one stream. It owns the backend's handles; it never decides what a
launch does (that is the `LaunchMode` it is handed) and keeps no cache of its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

from warmcli.backends.compiler import Compiler
from warmcli.errors import DeviceError as DeviceError
from warmcli.errors import LaunchError as LaunchError
from warmcli.execution.stream_mode import Stream
from warmcli.kernel import Kernel


@dataclass(frozen=True)
class DeviceFingerprint:
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


class Buffer:
    """Device memory of a shape and dtype; `handle` is the backend's (None when shape-only)."""

    def __init__(
        self, device_id: str, shape: Sequence[int], dtype: str, handle: Any = None
    ) -> None:
        self.device_id = device_id
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype).name
        self.handle = handle

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    def __repr__(self) -> str:
        return f"Buffer({self.device_id}, shape={self.shape}, dtype={self.dtype})"


@dataclass(frozen=True)
class LaunchConfig:
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

    def load_module(self, binary: bytes) -> Any: ...

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

    def time(self, stream: Stream, run: Callable[[], None]) -> float: ...

    def close(self) -> None: ...
