"""The verdict table and the override rules (pure logic, no backend)."""

from __future__ import annotations

import pytest

from warmcli import (
    LaunchMode,
    OverrideError,
    ProcessMode,
    ProcessModeOverride,
    StatisticsCollector,
    Stream,
    StreamMode,
    StreamModeOverride,
    resolve_launch_mode,
)
from warmcli.execution.process_mode import active_collector, current_process_mode, default_collector

VERDICTS = [
    (ProcessMode.EXECUTE, StreamMode.EXECUTE, LaunchMode.EXECUTE),
    (ProcessMode.EXECUTE, StreamMode.DISCARD, LaunchMode.COMPILE),
    (ProcessMode.COMPILE_ONLY, StreamMode.EXECUTE, LaunchMode.EXECUTE),
    (ProcessMode.COMPILE_ONLY, StreamMode.DISCARD, LaunchMode.QUEUE),
    (ProcessMode.COMPILE_AND_AUTOTUNE, StreamMode.EXECUTE, LaunchMode.EXECUTE),
    (ProcessMode.COMPILE_AND_AUTOTUNE, StreamMode.DISCARD, LaunchMode.COMPILE),
]


@pytest.mark.parametrize(("process", "stream", "verdict"), VERDICTS)
def test_verdict_table(process: ProcessMode, stream: StreamMode, verdict: LaunchMode) -> None:
    assert resolve_launch_mode(process, stream) is verdict


@pytest.mark.parametrize(
    ("process", "default"),
    [
        (ProcessMode.EXECUTE, StreamMode.EXECUTE),
        (ProcessMode.COMPILE_ONLY, StreamMode.DISCARD),
        (ProcessMode.COMPILE_AND_AUTOTUNE, StreamMode.DISCARD),
    ],
)
def test_stream_default_follows_process_mode(process: ProcessMode, default: StreamMode) -> None:
    stream = Stream("test")
    with ProcessModeOverride(process):
        assert stream.mode is default
        with StreamModeOverride(stream, StreamMode.EXECUTE):
            assert stream.mode is StreamMode.EXECUTE
            assert Stream("other").mode is default, "only the measured stream is switched"
        assert stream.mode is default
    assert stream.mode is StreamMode.EXECUTE


def test_override_sets_and_restores_mode_and_collector() -> None:
    collector = StatisticsCollector()
    assert current_process_mode() is ProcessMode.EXECUTE
    with ProcessModeOverride(ProcessMode.COMPILE_ONLY, collector) as got:
        assert got is collector
        assert current_process_mode() is ProcessMode.COMPILE_ONLY
        assert active_collector() is collector
    assert current_process_mode() is ProcessMode.EXECUTE
    assert active_collector() is default_collector()


def test_second_override_with_other_mode_or_collector_is_refused() -> None:
    collector = StatisticsCollector()
    with ProcessModeOverride(ProcessMode.COMPILE_ONLY, collector):
        with pytest.raises(OverrideError, match="already open"):
            with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE, collector):
                pass
        with pytest.raises(OverrideError, match="another collector"):
            with ProcessModeOverride(ProcessMode.COMPILE_ONLY, StatisticsCollector()):
                pass
        # The refused overrides left the open one intact.
        assert current_process_mode() is ProcessMode.COMPILE_ONLY
        assert active_collector() is collector
        with ProcessModeOverride(ProcessMode.COMPILE_ONLY, collector):
            assert current_process_mode() is ProcessMode.COMPILE_ONLY
        assert current_process_mode() is ProcessMode.COMPILE_ONLY
    assert current_process_mode() is ProcessMode.EXECUTE


def test_override_restores_after_exception() -> None:
    with pytest.raises(ZeroDivisionError):
        with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE):
            1 / 0  # noqa: B018
    assert current_process_mode() is ProcessMode.EXECUTE


def test_nested_overrides_restore_execute_only_when_the_last_one_exits() -> None:
    """Two same-mode overrides that close out of order (two threads of one pass), and one
    override object re-entered: the mode holds until the last exit, then is Execute again."""
    collector = StatisticsCollector()
    first = ProcessModeOverride(ProcessMode.COMPILE_ONLY, collector)
    second = ProcessModeOverride(ProcessMode.COMPILE_ONLY, collector)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert current_process_mode() is ProcessMode.COMPILE_ONLY, "second is still open"
    assert active_collector() is collector
    second.__exit__(None, None, None)
    assert current_process_mode() is ProcessMode.EXECUTE
    assert active_collector() is default_collector()

    same = ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE, collector)
    with same:
        with same:
            pass
        assert current_process_mode() is ProcessMode.COMPILE_AND_AUTOTUNE
    assert current_process_mode() is ProcessMode.EXECUTE
