"""Stream modes: all a stream knows is whether its launches run.

Every `Stream` (`warmcli.backends.base`, with the `StreamMode` it holds) takes its
default `StreamMode` from the process mode at the moment a launch resolves
(`Execute` under `ProcessMode.EXECUTE`, `Discard` under either discarding mode):
`default_for` is that rule, installed into the backends by
`warmcli.execution.process_mode`. A measurement (autotune's candidates, a throughput
probe) switches the one stream it measures on to `Execute` with a
`StreamModeOverride` for as long as it measures, and with `every_stream` every other
stream of that device too, for the launches the measuring thread issues (a launch
function's own stream: what it launches there is the candidate's work, which a discarded
launch would leave out of its time); other threads' streams keep their mode. The stream
never knows why. This module pushes and pops a stream's overrides (the stack is the
stream's; the thread's count is `warmcli.backends.base`'s) and owns no state; it never
launches anything itself.
"""

from __future__ import annotations

from types import TracebackType

from warmcli.backends.base import Stream, StreamMode, every_stream
from warmcli.execution.process_mode import default_for

__all__ = ["Stream", "StreamMode", "StreamModeOverride", "default_for"]


class StreamModeOverride:
    """Switch one stream to `mode` for the duration of a measurement; with `every_stream`
    (`Execute` only), every stream of its device too, for this thread's launches."""

    def __init__(
        self, stream: Stream, mode: StreamMode = StreamMode.EXECUTE, *, every_stream: bool = False
    ) -> None:
        if every_stream and mode is not StreamMode.EXECUTE:
            raise ValueError("StreamModeOverride: every_stream switches streams to Execute only")
        self.stream = stream
        self.mode = mode
        self.every_stream = every_stream

    def __enter__(self) -> Stream:
        self.stream._push(self.mode)
        if self.every_stream:
            try:
                every_stream(self.stream.device_id, 1)
            except BaseException:
                self.stream._pop()
                raise
        return self.stream

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self.every_stream:
                every_stream(self.stream.device_id, -1)
        finally:
            self.stream._pop()
