"""The seed's `execution` module: what a process does when a kernel is launched.

`base` (`LaunchMode`, the verdict decided once where a launch is issued),
`process_mode` (`ProcessMode` and its overrides), `stream_mode` (`StreamMode` and its
overrides; a `Stream` itself is `warmcli.backends.base`'s) and `statistics` (what
compiling and tuning cost, read by whoever asks). This file only re-exports them.
It owns the process-wide modes and collectors; it never compiles, loads or stores.
"""

from warmcli.execution.base import LaunchMode, resolve_launch_mode
from warmcli.execution.process_mode import (
    OverrideError,
    ProcessMode,
    ProcessModeOverride,
    active_collector,
    current_process_mode,
    default_collector,
)
from warmcli.execution.statistics import (
    AutotuneStatistics,
    CompilationStatistics,
    DeviceStatistics,
    ExecutionStatistics,
    StatisticsCollector,
    StatisticsReader,
)
from warmcli.execution.stream_mode import Stream, StreamMode, StreamModeOverride, default_for

__all__ = [
    "AutotuneStatistics",
    "CompilationStatistics",
    "DeviceStatistics",
    "ExecutionStatistics",
    "LaunchMode",
    "OverrideError",
    "ProcessMode",
    "ProcessModeOverride",
    "StatisticsCollector",
    "StatisticsReader",
    "Stream",
    "StreamMode",
    "StreamModeOverride",
    "active_collector",
    "current_process_mode",
    "default_collector",
    "default_for",
    "resolve_launch_mode",
]
