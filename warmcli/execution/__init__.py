"""The seed's `execution` module: what a process does when a kernel is launched.

`base` (`LaunchMode`, the verdict decided once where a launch is issued), `process_mode`
(`ProcessMode` and its overrides), `stream_mode` (`StreamMode` and its overrides; a `Stream`
itself is `warmcli.backends.base`'s) and `statistics` (what compiling and tuning cost, counted;
`snapshots`: as read by whoever asks). This file only re-exports them, each imported on first
use. The package owns the process-wide modes and collectors; it never compiles, loads or
stores.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing.TYPE_CHECKING`, without importing typing here
if TYPE_CHECKING:
    from typing import Any

    from warmcli.execution.base import LaunchMode, resolve_launch_mode
    from warmcli.execution.process_mode import (
        OverrideError,
        ProcessMode,
        ProcessModeOverride,
        active_collector,
        current_process_mode,
        default_collector,
    )
    from warmcli.execution.snapshots import (
        AutotuneStatistics,
        CompilationStatistics,
        DeviceStatistics,
        ExecutionStatistics,
    )
    from warmcli.execution.statistics import StatisticsCollector, StatisticsReader
    from warmcli.execution.stream_mode import Stream, StreamMode, StreamModeOverride, default_for

# Each name -> the module that holds it, imported when the name is first read (a process
# that never tunes never imports `stream_mode`).
_HOMES = {
    "LaunchMode": "base",
    "resolve_launch_mode": "base",
    "OverrideError": "process_mode",
    "ProcessMode": "process_mode",
    "ProcessModeOverride": "process_mode",
    "active_collector": "process_mode",
    "current_process_mode": "process_mode",
    "default_collector": "process_mode",
    "AutotuneStatistics": "snapshots",
    "CompilationStatistics": "snapshots",
    "DeviceStatistics": "snapshots",
    "ExecutionStatistics": "snapshots",
    "StatisticsCollector": "statistics",
    "StatisticsReader": "statistics",
    "Stream": "stream_mode",
    "StreamMode": "stream_mode",
    "StreamModeOverride": "stream_mode",
    "default_for": "stream_mode",
}


def __getattr__(name: str) -> Any:
    """A re-exported name, imported from its module on first use."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


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
