"""Stream modes: all a stream knows is whether its launches run.

Every `Stream` (`warmcli.backends.base`, with the `StreamMode` it holds) takes its
default `StreamMode` from the process mode at the moment a launch resolves
(`Execute` under `ProcessMode.EXECUTE`, `Discard` under either discarding mode):
`default_for` is that rule, installed into the backends by
`warmcli.execution.process_mode`. A measurement (autotune's candidates, a throughput
probe) switches the one stream it measures on to `Execute` with a
`StreamModeOverride` for as long as it measures. The stream never knows why. This
module pushes and pops a stream's overrides (the stack is the stream's) and owns no
state; it never launches anything itself.
"""

from __future__ import annotations

from types import TracebackType

from warmcli.backends.base import Stream, StreamMode
from warmcli.execution.process_mode import default_for

__all__ = ["Stream", "StreamMode", "StreamModeOverride", "default_for"]


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
