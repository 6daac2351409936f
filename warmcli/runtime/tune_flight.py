"""One measuring of a tune at a time: threads that miss one tune key at once wait for its measurer.

They take its pick, as a later call would. Eight request threads (or a warming pass's pool)
meeting a tune the bundle lacks each measured it, at once: eight times the candidates run, each
thread's timings taken while the seven others ran theirs, and each thread its own pick, the last
one stored. `Flights.measuring(key)` makes the first thread its measurer and holds the others
until it is done (measured, failed, abandoned or interrupted: whatever it put, they look up
again; where it put nothing they measure in turn). No wait can close a cycle: the thread
measuring a key is never held for it (a tune nested in its own launch function), nor is a thread
whose wait would close a loop (thread A measuring X, whose launch function tunes Y, while B
measures Y, whose launch function tunes X): it measures as before, at once with the other. A
waiter whose measurer is gone (a thread a forked child lacks) measures itself: a measurer is its
`Thread`, not its ident, which a child's new thread takes again (glibc hands it the stack of a
thread the child lacks: a waiter would wait on it, measuring nothing, for ever). A wait lasts
`LONGEST_WAIT` at most, then the waiter measures at once with the measurer, as before warm 52:
never a hang where the measurer waits on the waiter (a candidate's launch function meeting a
barrier across threads), only a long tune measured by more than one thread. Each runtime's
`Flights` owns its keys being measured and their waiters (under a lock a fork renews); it never
measures, looks a record up or prints.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from warmcli.forking import new_lock

_POLL_SECONDS = (0.0005, 0.02)  # a waiter's first look again, and its slowest
LONGEST_WAIT = 2.0  # seconds a waiter waits for a measurer before it measures too


class Flights:
    """The tune keys being measured on one runtime, and who waits on them."""

    def __init__(self) -> None:
        self._lock = new_lock(self)
        self._owners: dict[str, threading.Thread] = {}  # tune key -> the thread measuring it
        self._waiting: dict[threading.Thread, str] = {}  # thread -> the tune key it waits for

    @contextmanager
    def measuring(self, key: str) -> Iterator[bool]:
        """True: this thread measures `key` (or measures at once with another, where waiting
        would close a cycle or lasted `LONGEST_WAIT`); False: another thread measured it
        meanwhile, after a wait: look it up again."""
        me = threading.current_thread()
        with self._lock:
            owner = self._owners.get(key)
            if owner is None:
                self._owners[key] = me
            elif owner is not me and not self._closes_cycle(owner, me):
                self._waiting[me] = key
        if owner is None:
            try:
                yield True
            finally:
                with self._lock:
                    del self._owners[key]
            return
        if owner is me or me not in self._waiting:  # nested, or a cycle: measured as before
            yield True
            return
        try:
            done = self._wait(key, owner)
        finally:
            with self._lock:
                del self._waiting[me]
        yield not done

    def _closes_cycle(self, owner: threading.Thread, me: threading.Thread) -> bool:
        """Whether `owner` waits, through the threads it waits on, for a key `me` measures."""
        seen = set()
        at: threading.Thread | None = owner
        while at is not None and at not in seen:
            seen.add(at)
            waited = self._waiting.get(at)
            at = self._owners.get(waited) if waited is not None else None
            if at is me:
                return True
        return False

    def _wait(self, key: str, owner: threading.Thread) -> bool:
        """Until `owner` no longer measures `key`, or is gone (a fork's child lacks it): True;
        False once `LONGEST_WAIT` passed (then this thread measures too)."""
        pause, slowest = _POLL_SECONDS
        given_up = time.monotonic() + LONGEST_WAIT
        while True:
            with self._lock:
                if self._owners.get(key) is not owner:
                    return True
            if not owner.is_alive():  # (a fork's child: every thread but its own stopped)
                with self._lock:
                    if self._owners.get(key) is owner:
                        del self._owners[key]  # its measurer is gone: a waiter measures
                return True
            if time.monotonic() >= given_up:
                return False
            time.sleep(pause)
            pause = min(pause * 2, slowest)
