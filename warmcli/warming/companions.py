"""The runtime of another device a workload asks for during a pass: the host's.

A workload run on a GPU, or on `sm_90` in a GPU-less pre-build (`--arch`), may launch and
tune host kernels on `warmcli.runtime("host")` beside what it does on the runtime it is
given. During a pass that call gets the run's own host runtime (`Companions.provide`,
through `warmcli.runtime.binding.companions`), made on first ask over the run's bundle
with the run's settings, so what the workload does there is warmed, stored and verified
as the pass's own devices' work is: a production process serving both is served both.
Only the host is provided, and only where the run's devices do not hold it already (a GPU
asked for in a host run is the process's own, as before). The module owns those runtimes
and their devices until `close`, which retires them and the pass's own runtimes
(`warmcli.warming.ended`), and returns what that noted; it never runs a pass and never prints.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

from warmcli.backends.base import Device
from warmcli.backends.host import HostDevice
from warmcli.runtime.runtime import Runtime
from warmcli.warming.ended import retire


class Companions:
    """The host runtime a pass's workload asks for, made once by `make`."""

    def __init__(self, make: Callable[[Device], Runtime], primaries: Sequence[Runtime]) -> None:
        self._make = make
        self._ids = {r.device.id for r in primaries}
        self._primaries = list(primaries)
        self._lock = threading.Lock()
        self.runtimes: list[Runtime] = []

    def provide(self, device: str) -> Runtime | None:
        """The run's runtime for `device`, made on first ask; None where warm provides none
        (only `host` is, where the run does not hold it already)."""
        if device != "host" or "host" in self._ids:
            return None
        with self._lock:
            if not self.runtimes:
                self.runtimes.append(self._make(HostDevice()))
            return self.runtimes[0]

    def close(self) -> list[str]:
        """Retire the pass's runtimes (`warmcli.warming.ended`: they serve no pass after
        this) and close the devices of those made; the notes retiring made (a thread's
        launch still under way), for the pass's report."""
        notes = [n for n in map(retire, self._primaries + self.runtimes) if n]
        for runtime in self.runtimes:
            runtime.device.close()
        return notes
