"""The process mode: what the whole process does with the work it is asked to run.

`ProcessMode` is the process's, on every device: it governs the state that lives
process-wide (each device's compile queue, the tune cache, measurements that any
other work on a device would skew). `ProcessModeOverride` is the one way to change
it: a context manager that sets the mode and names the `StatisticsCollector` that
everything the mode triggers is counted into. A stream's default mode follows it
(`default_for`'s rule, installed into `warmcli.backends.base` on import). One override is
open at a time; a second one with another mode or another collector is refused,
never silently nested. Every note warm makes goes through `note_reported`: into the active
collector and, where an override names another, into the default one as well, which
`warmcli.report()` and a reader of the default collector read (each note once there). This
module owns that process-wide slot and nothing else: it never compiles, launches or prints.
"""

from __future__ import annotations

import enum
import sys
import threading
from types import TracebackType

from warmcli.backends.base import StreamMode, set_default_stream_mode
from warmcli.errors import OverrideError
from warmcli.execution.statistics import StatisticsCollector
from warmcli.forking import renew_on_fork


class ProcessMode(enum.Enum):
    """What every launch in the process does by default."""

    EXECUTE = "Execute"
    COMPILE_ONLY = "CompileOnly"
    COMPILE_AND_AUTOTUNE = "CompileAndAutotune"

    @property
    def discards(self) -> bool:
        """Whether launches are discarded (buffers are left as they were)."""
        return self is not ProcessMode.EXECUTE


_lock = threading.RLock()
renew_on_fork(sys.modules[__name__])
_mode: ProcessMode = ProcessMode.EXECUTE
_collector: StatisticsCollector | None = None
_depth = 0
_default_collector = StatisticsCollector()


def current_process_mode() -> ProcessMode:
    """The process mode in force now."""
    return _mode


def default_for(process_mode: ProcessMode) -> StreamMode:
    """The mode every stream has unless a measurement overrides it."""
    return StreamMode.DISCARD if process_mode.discards else StreamMode.EXECUTE


# A stream with no override takes its mode from here: the process mode leaves `Execute`
# only through this module, so the default is in place whenever it matters. Read on every
# launch: `default_for(_mode)` written out, so it costs no call but this one.
set_default_stream_mode(
    lambda: StreamMode.EXECUTE if _mode is ProcessMode.EXECUTE else StreamMode.DISCARD
)


def active_collector() -> StatisticsCollector:
    """The collector of the open override, or the process's own default collector.

    Production code (no override open) still counts what it triggers, so a report
    can say what the bundle lacked.
    """
    collector = _collector
    return collector if collector is not None else _default_collector


def default_collector() -> StatisticsCollector:
    """The collector counted into when no override is open."""
    return _default_collector


def note_reported(message: str) -> None:
    """Note `message` in the active collector, and in the default one too where an override
    names another (once where it names the default one): `warmcli.report()` and the README's
    `StatisticsReader(default_collector()).notes()` read the default collector, so every note
    (a PTX JIT, a failed compile, a discarded read) reaches them whatever collector a user's
    `ProcessModeOverride` counts into. Warm notes through this alone, never `.note` itself."""
    collector = active_collector()
    collector.note(message)
    if collector is not _default_collector:
        _default_collector.note(message)


class ProcessModeOverride:
    """Set the process mode for a block and count what it triggers into `collector`.

    Re-entering with the same mode and the same collector nests (the same object,
    or another one, on any thread, closed in any order): the mode holds until the
    last of them exits. Anything else while an override is open raises `OverrideError`.
    """

    def __init__(self, mode: ProcessMode, collector: StatisticsCollector | None = None) -> None:
        self.mode = mode
        self.collector = collector if collector is not None else StatisticsCollector()
        self._entered = 0

    def __enter__(self) -> StatisticsCollector:
        global _mode, _collector, _depth
        with _lock:
            if _depth and (_mode is not self.mode or _collector is not self.collector):
                raise OverrideError(
                    f"a ProcessModeOverride({_mode.value}) is already open; "
                    f"cannot open ProcessModeOverride({self.mode.value}) with "
                    f"{'the same' if _collector is self.collector else 'another'} collector"
                )
            _mode, _collector = self.mode, self.collector
            _depth += 1
            self._entered += 1
        return self.collector

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        global _mode, _collector, _depth
        with _lock:
            assert self._entered > 0, "override exited without being entered"
            self._entered -= 1
            _depth -= 1
            if _depth == 0:  # outside every override the process executes
                _mode, _collector = ProcessMode.EXECUTE, None
