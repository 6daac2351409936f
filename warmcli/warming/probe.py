"""The compiler probe of a run: each device's compiler and its version, read in a thread.

`CompilerProbe` starts a thread that calls `compiler_info` for every device (a
`--version` process, or a library's version) while the run opens its bundle; `join`
returns and raises what the thread raised; `stop` (on an interrupt) kills the process
groups the thread started (`warmcli.backends.processes.Owner`: a `--version` and its
children), then joins for a moment, as does an interrupt that lands as the thread starts.
State: the thread, the owner of its processes and what it raised (what it found goes into
the caller's list). It never opens a bundle and never prints.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from warmcli.backends.base import Device
from warmcli.backends.machine import compiler_info
from warmcli.backends.processes import Owner, owned_by

STOP_WAIT = 2.0  # seconds `stop` waits for the thread once its processes are killed


class CompilerProbe:
    """`compiler_info` of each device into `compilers`, in a thread started at once."""

    def __init__(self, devices: Sequence[Device], compilers: list[dict[str, str]]) -> None:
        self._failed: list[BaseException] = []
        self._children = Owner()

        def probe() -> None:
            try:
                with owned_by(self._children):
                    compilers.extend(compiler_info(d) for d in devices)
            except BaseException as exc:  # for the caller's thread, after the join
                self._failed.append(exc)

        self._thread = threading.Thread(target=probe, name="warm-probe", daemon=True)
        try:
            self._thread.start()
        except BaseException:  # an interrupt as it started (`start` waits for it to run):
            self.stop()  # the thread runs on, and the caller, never given it, cannot stop it
            raise

    def join(self) -> None:
        """Wait for the probe; raise what it raised."""
        self._thread.join()
        if self._failed:
            raise self._failed[0]

    def stop(self) -> None:
        """Kill the processes the probe's thread started (each in its own group, with their
        children: a wrapper's `sleep` holds the pipe the probe reads), and any it starts
        from now on, then wait a moment for the thread."""
        self._children.kill()
        deadline = time.monotonic() + STOP_WAIT
        while True:
            try:
                self._thread.join(max(0.0, deadline - time.monotonic()))
                return
            except RuntimeError:  # its start cut short: running, but not yet marked so (or,
                if time.monotonic() >= deadline:  # cut before that, never to run)
                    return
                time.sleep(0.001)
