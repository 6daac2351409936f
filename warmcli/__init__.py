"""warm: make GPU processes start hot.

A workload run under `ProcessMode.COMPILE_ONLY`, then `COMPILE_AND_AUTOTUNE`,
gathers every kernel it compiles and every tune decision it reaches into an
environment bundle; a production process that loads the bundle
(`use_bundle(path)` or `WARM_BUNDLE`) compiles nothing and tunes nothing. This
package imports no GPU library: `pycuda` is loaded only when a CUDA device is
opened. Its names are imported on first use (`from warmcli import Kernel` loads what
`Kernel` needs, nothing else), so `import warmcli` and `warm --version` stay light; a fork
made while another thread imports them waits for that import (`_before_fork`).
"""

from __future__ import annotations

import os
import sys
import types

TYPE_CHECKING = False  # `typing.TYPE_CHECKING`, without importing typing (and re) at import
if TYPE_CHECKING:
    from typing import Any

    from warmcli._version import __version__
    from warmcli.backends.base import Buffer, Stream, StreamMode
    from warmcli.bundle.store import Bundle
    from warmcli.errors import (
        BundleError,
        DeviceError,
        DiscardedReadError,
        DiscardedReadWarning,
        KernelCompileError,
        LaunchError,
        OverrideError,
        SignatureError,
        StrictMissError,
        TuneFailure,
        WarmError,
    )
    from warmcli.execution.base import LaunchMode, resolve_launch_mode
    from warmcli.execution.process_mode import ProcessMode, ProcessModeOverride
    from warmcli.execution.snapshots import (
        AutotuneStatistics,
        CompilationStatistics,
        ExecutionStatistics,
    )
    from warmcli.execution.statistics import StatisticsCollector, StatisticsReader
    from warmcli.execution.stream_mode import StreamModeOverride
    from warmcli.kernel import Kernel
    from warmcli.production import report, runtime, use_bundle
    from warmcli.production_report import ProductionReport
    from warmcli.records import MissExplanation
    from warmcli.runtime.runtime import Runtime
    from warmcli.runtime.tune import Tunable

# Each public name -> the module that defines it, imported when the name is first read.
_HOMES = {
    "AutotuneStatistics": "warmcli.execution.snapshots",
    "Buffer": "warmcli.backends.base",
    "Bundle": "warmcli.bundle.store",
    "BundleError": "warmcli.errors",
    "CompilationStatistics": "warmcli.execution.snapshots",
    "DeviceError": "warmcli.errors",
    "DiscardedReadError": "warmcli.errors",
    "DiscardedReadWarning": "warmcli.errors",
    "ExecutionStatistics": "warmcli.execution.snapshots",
    "Kernel": "warmcli.kernel",
    "KernelCompileError": "warmcli.errors",
    "LaunchError": "warmcli.errors",
    "LaunchMode": "warmcli.execution.base",
    "MissExplanation": "warmcli.records",
    "OverrideError": "warmcli.errors",
    "ProcessMode": "warmcli.execution.process_mode",
    "ProcessModeOverride": "warmcli.execution.process_mode",
    "ProductionReport": "warmcli.production_report",
    "Runtime": "warmcli.runtime.runtime",
    "SignatureError": "warmcli.errors",
    "StatisticsCollector": "warmcli.execution.statistics",
    "StatisticsReader": "warmcli.execution.statistics",
    "Stream": "warmcli.backends.base",
    "StreamMode": "warmcli.backends.base",
    "StreamModeOverride": "warmcli.execution.stream_mode",
    "StrictMissError": "warmcli.errors",
    "Tunable": "warmcli.runtime.tune",
    "TuneFailure": "warmcli.errors",
    "WarmError": "warmcli.errors",
    "__version__": "warmcli._version",
    "report": "warmcli.production",
    "resolve_launch_mode": "warmcli.execution.base",
    "runtime": "warmcli.production",
    "use_bundle": "warmcli.production",
}


class _Package(types.ModuleType):
    """The package keeps `warmcli.runtime` the production `runtime()` function, as it always
    was: importing the package `warmcli.runtime` would otherwise bind the package there."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "runtime" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str) -> Any:
    """A public name, or a submodule (`warmcli.production`), imported on first use."""
    import importlib

    home = _HOMES.get(name)
    if home is None:
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module 'warmcli' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def _before_fork() -> None:
    """Until `warmcli.forking` hooks forks itself (imported with a runtime's modules), a fork
    made while another thread imports for warm (`warmcli.import_wait`) imports it and waits
    as its hook does (`forking.before_unhooked`: a stop signal meanwhile held, not printed as
    "Exception ignored" and lost): a thread's first `use_bundle` imports for a second, and a
    child forked meanwhile waited for ever on the import lock of the module that thread held."""
    if not getattr(sys.modules.get("warmcli.forking"), "HOOKED", False):
        from warmcli.import_wait import importing_elsewhere

        if importing_elsewhere():
            aside, noted, noting = _stops_noted()  # (a Ctrl-C inside the import: not lost)
            try:
                from warmcli.forking import before_unhooked

                before_unhooked(aside, noted)
            finally:  # (forking's hold swapped its own in, unless it failed or held none)
                _set_back(aside, noting)


def _set_back(aside: dict[int, Any], noting: Any) -> None:
    """The handlers `_stops_noted` set aside, back where its `noting` one is still set."""
    import signal

    for signum, handler in aside.items():
        if signal.getsignal(signum) is noting:
            signal.signal(signum, handler)


def _stops_noted() -> tuple[dict[int, Any], list[int], Any]:
    """In the main thread, each stop signal's (SIGINT, SIGTERM, SIGHUP) Python handler set
    aside for one noting it, until `warmcli.forking`'s hold stands in for them: a stop then ran
    the program's handler inside the fork's hook, where its `KeyboardInterrupt` is printed and
    lost. The handlers set aside, the list the stops that come are noted in, and the noting one."""
    import signal
    import threading

    noted: list[int] = []

    def noting(signum: int, _frame: Any) -> None:
        noted.append(signum)

    if threading.current_thread() is not threading.main_thread():
        return {}, noted, noting
    aside = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    aside = {s: h for s, h in aside.items() if callable(h)}
    for signum in aside:
        signal.signal(signum, noting)
    return aside, noted, noting


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork)


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "AutotuneStatistics",
    "Buffer",
    "Bundle",
    "BundleError",
    "CompilationStatistics",
    "DeviceError",
    "DiscardedReadError",
    "DiscardedReadWarning",
    "ExecutionStatistics",
    "Kernel",
    "KernelCompileError",
    "LaunchError",
    "LaunchMode",
    "MissExplanation",
    "OverrideError",
    "ProcessMode",
    "ProcessModeOverride",
    "ProductionReport",
    "Runtime",
    "SignatureError",
    "StatisticsCollector",
    "StatisticsReader",
    "Stream",
    "StreamMode",
    "StreamModeOverride",
    "StrictMissError",
    "Tunable",
    "TuneFailure",
    "WarmError",
    "__version__",
    "report",
    "resolve_launch_mode",
    "runtime",
    "use_bundle",
]
