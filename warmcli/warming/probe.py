"""The compiler probe of a run: each device's compiler and its version, read in a thread.

`CompilerProbe` starts a thread that calls `compiler_info` for every device (a
`--version` process, or a library's version) while the run opens its bundle; `join`
returns and raises what the thread raised; `stop` (on an interrupt) kills the
processes the thread started, and theirs, then joins for a moment. State: the thread
and what it found or raised. It never opens a bundle and never prints.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Sequence

from warmcli.backends.base import Device
from warmcli.backends.machine import compiler_info

STOP_WAIT = 2.0  # seconds `stop` waits for the thread once its processes are killed


class CompilerProbe:
    """`compiler_info` of each device into `compilers`, in a thread started at once."""

    def __init__(self, devices: Sequence[Device], compilers: list[dict[str, str]]) -> None:
        self._failed: list[BaseException] = []

        def probe() -> None:
            try:
                compilers.extend(compiler_info(d) for d in devices)
            except BaseException as exc:  # for the caller's thread, after the join
                self._failed.append(exc)

        self._thread = threading.Thread(target=probe, name="warm-probe", daemon=True)
        self._thread.start()

    def join(self) -> None:
        """Wait for the probe; raise what it raised."""
        self._thread.join()
        if self._failed:
            raise self._failed[0]

    def stop(self) -> None:
        """Kill the processes the probe's thread started (and their children: a wrapper's
        `sleep` holds the pipe the probe reads), then wait a moment for the thread."""
        tid = self._thread.native_id  # (not `is_alive`: an interrupted join clears it)
        for pid in [] if tid is None else _descendants(f"/proc/self/task/{tid}/children"):
            with contextlib.suppress(OSError):  # gone already
                os.kill(pid, signal.SIGKILL)
        self._thread.join(STOP_WAIT)


def _descendants(children: str) -> list[int]:
    """The processes listed in a `/proc/.../children` file and all theirs (Linux; none
    where /proc does not say)."""
    found: list[int] = []
    pending = [children]
    while pending:
        try:
            with open(pending.pop()) as f:
                pids = [int(p) for p in f.read().split()]
        except (OSError, ValueError):
            continue
        found += pids
        for pid in pids:
            try:
                tasks = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
            pending += [f"/proc/{pid}/task/{t}/children" for t in tasks]
    return found
