"""The launches and tunes under way on a runtime, by thread: what a retiring pass waits for.

`Runtime.launch` and `Runtime.tune` count themselves in (`calls[thread] += 1`) before they ask
the runtime's `retired` gate, and out (`left`) as they return or raise, so a pass that retires
its runtime (`warmcli.warming.ended`) and then closes its bundle can wait (`wait_for`) for a
call another thread had under way: every call either was counted before the gate was set (and
is waited for) or meets the gate. A dict's item written by its own thread only: no lock on a
launch. It owns no state and never prints."""

from __future__ import annotations

import time


def left(calls: dict[int, int], ident: int) -> None:
    """The thread `ident`'s call returned (or raised): counted out of `calls`."""
    n = calls[ident] - 1
    if n:
        calls[ident] = n
    else:
        del calls[ident]


def wait_for(calls: dict[int, int], owner: int, seconds: float) -> list[int]:
    """Wait until no thread but `owner` has a call under way in `calls`, `seconds` at most:
    the threads still in one then (none: all returned)."""
    deadline = time.monotonic() + seconds
    while True:
        others = [t for t in list(calls) if t != owner]
        if not others or time.monotonic() >= deadline:
            return others
        time.sleep(0.002)
