"""A runtime whose passes ended, and a thread the workload left running that still uses it.

Each pass waits for the non-daemon threads its workload left running, as Python waits for them
before a process ends; a daemon thread it does not wait for (README: the workload contract) may
still launch or tune on that pass's runtime after the pass ended: its bundle closed by then,
and the pass running then another's. `retire` (the runtime's `retired` gate, asked first at
each launch and tune) gives such a thread what Python gives it: at its next launch or tune
there it stops (`SystemExit`, which ends a thread silently), as Python stops a daemon thread as
its process ends, said once in a note (the pass running then, if any, shows it); nothing of it
is counted, looked up in the bundle or stored, so a good bundle is never called corrupt for it.
One the pass running then would execute, of a kernel the runtime loaded or a shape it measured
(kept in memory), goes on: nothing of it is looked up, built or measured (a service's worker
thread, made at the first call and kept for the next, serves the later passes so; on a device
closed since, its launch raises). The thread that ran the passes (the one that retires the
runtime) keeps the runtime as it was, its tunes read from memory only. A launch or tune another
thread had under way as the runtime was retired (past the gate) is waited for, before the pass
closes its bundle, `LATE_WAIT_SECONDS` at most (read off the threads' stacks: a frame of the
runtime's `launch` or `tune`, so a launch counts nothing for it; that frame, so a later call
the gate let go on, a thread launching in a loop, is not waited for); one still under way then (a
launch that never returns, say) is said in a note, which `retire` returns for the pass's
report, and left running: what it reads of the closed bundle later is no miss (its runtime's
misses are closed), it builds cold what it needs and nothing of it is stored.
Each pass waits so too, once its entry returned and before it stores or is judged
(`wait_under_way`): a daemon thread's tune still measured as the entry returned is the pass's,
stored and counted (it was stored by no pass, its kernels were), once; a call given up on there
is not waited for again here. Its one state: the calls a wait gave up on (`_GIVEN_UP`,
forgotten as each returns); it never prints."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

from warmcli.execution.base import LaunchMode, resolve_launch_mode
from warmcli.execution.process_mode import current_process_mode, note_reported
from warmcli.runtime.runtime import Runtime

LATE_WAIT_SECONDS = 10.0  # the longest a retiring pass waits for another thread's launch


def retire(runtime: Runtime) -> str:
    """From now on, a thread other than this one that launches or tunes on `runtime` is
    stopped there, said once, unless what it asks is served as it was (a runtime retired
    already stays as it is): the runtime's `retired` gate, which it asks first. Returns the
    note on a call still under way after the wait ("" where none was), for the pass's own
    notes: it retires after the pass's statistics were read."""
    if runtime.retired is not None:
        return ""
    owner, lock, said = threading.get_ident(), threading.Lock(), [False]
    runtime.misses.closed = True  # its misses are no pass's to explain now
    runtime.tunes.bundle = None  # (closed: its records are those in memory)

    def gate(call: str, what: Any, inputs: tuple[Any, ...], stream: Any) -> None:
        if threading.get_ident() == owner:
            return
        if call == "launch":
            label = getattr(what, "label", type(what).__name__)
            told, served = f"launched kernel {label}", lambda: runtime.kernels.loaded(what)
        else:
            told = f"tuned {getattr(what, 'name', type(what).__name__)}"
            served = lambda: _measured(runtime, what, inputs)  # noqa: E731
        if _executes(runtime, served, stream):
            return
        with lock:
            first, said[0] = not said[0], True
        if first:
            name = threading.current_thread().name
            note_reported(
                f"thread {name} {told} after its pass ended (a pass waits for no "
                "daemon thread, as Python does not): stopped there, as Python stops a daemon "
                "thread as its process ends; what it launches then is not warmed"
            )
        raise SystemExit  # ends the thread silently, as Python's own hook does

    runtime.retired = gate
    return wait_under_way([runtime])  # for calls past the gate already


def wait_under_way(runtimes: Sequence[Runtime]) -> str:
    """Wait, `LATE_WAIT_SECONDS` at most, for the launches and tunes that threads other than
    this one have under way on `runtimes` now (a later call is not waited for); returns the
    note on those still under way then, said once and not waited for again ("" where none)."""
    owner = threading.get_ident()
    deadline = time.monotonic() + LATE_WAIT_SECONDS
    still = _under_way(runtimes, owner)  # each such call's frame: waited for until it returns
    while still and time.monotonic() < deadline:
        time.sleep(0.002)
        now = _under_way(runtimes, owner)
        still = {t: frame for t, frame in still.items() if now.get(t) is frame}
    if not still:
        return ""
    _GIVEN_UP.update(still)
    names = {t.ident: t.name for t in threading.enumerate()}
    who = ", ".join(names.get(t, str(t)) for t in still)
    note = (
        f"thread {who} still in a launch or tune {LATE_WAIT_SECONDS:g} s after its pass "
        "ended: not waited for further; what it does then is not warmed"
    )
    note_reported(note)
    return note


_CALLS = (Runtime.launch.__code__, Runtime.tune.__code__)
# A thread's call a wait gave up on (its outermost frame), not waited for again by a later one.
_GIVEN_UP: dict[int, FrameType] = {}


def _under_way(runtimes: Sequence[Runtime], owner: int) -> dict[int, FrameType]:
    """The threads but `owner` in a launch or tune of one of `runtimes` now, by their stacks,
    each with its outermost such call's frame (a call that passed the gate before it was set
    is there until it returns; one that had not, meets it, and a later one is another frame),
    but a call given up on already."""
    busy = {}
    for ident, frame in sys._current_frames().items():
        at = None if ident == owner else frame
        while at is not None:
            if any(at.f_code is c for c in _CALLS) and any(
                at.f_locals.get("self") is r for r in runtimes
            ):
                busy[ident] = at
            at = at.f_back
    for ident, frame in list(_GIVEN_UP.items()):
        if busy.get(ident) is frame:
            del busy[ident]
        elif ident not in busy:  # returned since: forgotten
            del _GIVEN_UP[ident]
    return busy


def _measured(runtime: Runtime, tunable: Any, inputs: tuple[Any, ...]) -> bool:
    """Whether a tune's pick is measured and kept in memory (its launch checked)."""
    if len(tunable.candidates) == 1:  # answered, not tuned: its launch is checked
        return True
    shape = tunable.shape_key(inputs)
    record = runtime.tunes.get(tunable.tune_key(shape, runtime.device.fingerprint.identity))
    return record is not None and record.status == "measured"


def _executes(runtime: Runtime, served: Callable[[], bool], stream: Any) -> bool:
    """Whether a late launch or tune goes on: executed (as the pass running now executes)
    with what its passes loaded or measured, nothing looked up in the closed bundle, built,
    measured or counted as the pass's own (a service's worker thread, made at a first call
    and kept for the next, serves the later passes so)."""
    try:
        on = stream or runtime.default_stream
        mode = resolve_launch_mode(current_process_mode(), on.mode)
        return mode is LaunchMode.EXECUTE and served()
    except Exception:  # of the wrong kind, say: stopped, as any other
        return False
