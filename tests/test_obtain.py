"""The launch verdict is decided once, by `Runtime.launch`, and handed down to the kernel
cache (`kernels.obtain(kernel, mode)`); nothing below the runtime derives it again."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
from test_explain import scale

from warmcli import (
    LaunchMode,
    ProcessMode,
    ProcessModeOverride,
    Runtime,
    StatisticsCollector,
    StreamMode,
    StreamModeOverride,
)
from warmcli.backends.host import HostDevice

PACKAGE = Path(__file__).resolve().parent.parent / "warmcli"
BELOW_THE_LAUNCH = ["runtime/kernel_cache.py", "runtime/lookup.py", "runtime/misses.py"]


@pytest.mark.parametrize(
    ("process", "stream", "verdict"),
    [
        (ProcessMode.COMPILE_ONLY, StreamMode.DISCARD, LaunchMode.QUEUE),
        (ProcessMode.COMPILE_AND_AUTOTUNE, StreamMode.DISCARD, LaunchMode.COMPILE),
        (ProcessMode.EXECUTE, StreamMode.EXECUTE, LaunchMode.EXECUTE),
    ],
)
def test_launch_hands_its_verdict_to_the_kernel_cache(
    process: ProcessMode, stream: StreamMode, verdict: LaunchMode
) -> None:
    rt = Runtime(HostDevice(), None, misses=None)
    handed: list[LaunchMode] = []
    obtain = rt.kernels.obtain

    def spy(kernel: object, mode: LaunchMode, args: object = None) -> object:
        handed.append(mode)  # (the launch's arguments, checked before a load, go on too)
        return obtain(kernel, mode, args)  # type: ignore[arg-type]

    rt.kernels.obtain = spy  # type: ignore[method-assign]
    x = rt.upload(np.ones(8, dtype=np.float32))
    collector = StatisticsCollector()
    with ProcessModeOverride(process, collector), StreamModeOverride(rt.default_stream, stream):
        got = rt.launch(scale(), x, 2.0, 8)
    assert got is verdict and handed == [verdict]
    compilation = collector.reader().compilation
    if verdict is LaunchMode.QUEUE:  # only queued: nothing compiled until the queue is flushed
        assert compilation.queued == 1 and compilation.compiled == 0
    else:
        assert compilation.compiled == 1


@pytest.mark.parametrize("name", BELOW_THE_LAUNCH)
def test_nothing_below_the_launch_derives_the_verdict(name: str) -> None:
    tree = ast.parse((PACKAGE / name).read_text())
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    used |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    assert not used & {"resolve_launch_mode", "current_process_mode", "StreamMode"}, name
