"""The verdict for one launch, resolved where it is issued, on its stream.

`LaunchMode` is what the backend is handed: `Execute` (run it), `Compile` (obtain
the compiled kernel, then discard the launch) or `Queue` (only put its kernel on
the device's compile queue). It is a pure function of the process mode and the
mode of the stream the launch goes out on; this module holds no state.
"""

from __future__ import annotations

import enum

from warmcli.backends.base import StreamMode
from warmcli.execution.process_mode import ProcessMode


class LaunchMode(enum.Enum):
    """What the backend does with one launch."""

    EXECUTE = "Execute"
    COMPILE = "Compile"
    QUEUE = "Queue"


def resolve_launch_mode(process_mode: ProcessMode, stream_mode: StreamMode) -> LaunchMode:
    """The verdict table: a stream switched to `Execute` always runs its launches;
    a discarding stream queues under `CompileOnly` and compiles otherwise."""
    if stream_mode is StreamMode.EXECUTE:
        return LaunchMode.EXECUTE
    if process_mode is ProcessMode.COMPILE_ONLY:
        return LaunchMode.QUEUE
    return LaunchMode.COMPILE
