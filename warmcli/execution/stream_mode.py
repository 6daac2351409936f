"""Stream modes: all a stream knows is whether its launches run.

Every `Stream` takes its default `StreamMode` from the process mode at the moment
a launch resolves (`Execute` under `ProcessMode.EXECUTE`, `Discard` under either
discarding mode). A measurement (autotune's candidates, a throughput probe)
switches the one stream it measures on to `Execute` with a `StreamModeOverride`
for as long as it measures. The stream never knows why. This module owns each
stream's override stack; it never launches anything itself.
"""

from __future__ import annotations

import enum
import itertools
import threading
from types import TracebackType

from warmcli.execution.process_mode import ProcessMode, current_process_mode


class StreamMode(enum.Enum):
    """Whether launches on a stream run."""

    EXECUTE = "Execute"
    DISCARD = "Discard"

    @staticmethod
    def default_for(process_mode: ProcessMode) -> StreamMode:
        """The mode every stream has unless a measurement overrides it."""
        return StreamMode.DISCARD if process_mode.discards else StreamMode.EXECUTE


_stream_ids = itertools.count()


class Stream:
    """An ordered queue of launches on one device; backends subclass it for their handle."""

    def __init__(self, device_id: str) -> None:
        self.device_id = device_id
        self.id = next(_stream_ids)
        self._overrides: list[StreamMode] = []
        self._lock = threading.Lock()

    @property
    def mode(self) -> StreamMode:
        """The override in force, else the default from the process mode.

        Read on every launch, so it takes no lock: pushes and pops hold the lock, and
        a read that races a pop of the last override sees the default it falls back to.
        """
        overrides = self._overrides
        if overrides:
            try:
                return overrides[-1]
            except IndexError:
                pass
        return StreamMode.default_for(current_process_mode())

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


class StreamModeOverride:
    """Switch one stream to `mode` for the duration of a measurement."""

    def __init__(self, stream: Stream, mode: StreamMode = StreamMode.EXECUTE) -> None:
        self.stream = stream
        self.mode = mode

    def __enter__(self) -> Stream:
        self.stream._push(self.mode)
        return self.stream

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stream._pop()
