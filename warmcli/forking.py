"""What a fork does to the locks of warm's state, so that a forked child can use it.

`os.fork()` copies a lock that another thread holds as held, and nothing in the child ever
releases it: a child forked while another thread compiled a kernel (the kernel cache holds
its lock for the compile), read the bundle or made a runtime would wait for ever on its
first launch, its report or its exit. An object that guards its state with locks hands
itself to `renew_on_fork` with their attribute names (a module or a class, for their own;
`new_lock` and `new_rlock` make an object's `_lock` so); in a forked child each such lock is
replaced by a new one, not held (the state it guarded is as the forking thread left it:
each dict and set whole, between two operations). The child goes on from there: what the
other thread was doing (a compile) is not done in the child, which does it again when it
needs it. A lock `held` besides (a bundle's, around every SQLite call on its connection)
is taken before the fork, for up to `HOLD_SECONDS` in all, and released after it in the
parent: SQLite's own mutexes, which no renewal reaches, are then free when the child is
made; one not taken in time (another thread's read lasting past it) leaves the child
`sqlite_unsafe`: that thread may hold a mutex of SQLite's the child would wait on for ever,
so no SQLite is used there (`warmcli.bundle.file` opens no connection: served cold).
Within that time, and first, a fork waits for another thread's import for warm to end (warm
imports a writer's, a compiler's modules on first use): a module's import lock held by a
thread the child lacks, the child would wait for ever importing that module (the lock is
importlib's, read where it keeps them; not found there, nothing is waited for), and the
import may lead to a bundle made and written, whose lock is then taken. An import of the
user's own (not a module of warm's, not begun by warm's code) is never waited for: it may
last, or wait on the forking thread, and would hold up every fork for nothing of warm's.
A stop signal (SIGINT, SIGTERM, SIGHUP) sent during a main thread's fork (its wait, or the fork
itself: a process's whole memory mapped again, milliseconds) has its Python handler run in that
wait or in `_after_in_parent`, inside the fork's functions, where what it raises is only printed:
it is noted instead, ends the wait (the wakeup fd of asyncio's loop set aside meanwhile: it would
be written twice), and is sent again as the fork returns (`_hold_stops`), by a thread, else at
exit where the main code ended first (`_stops_at_exit`: the process then ends as the handler
asks, by `ENDS_STOPPED`'s function, a Ctrl-C's traceback shown, a code's text written, as
Python shows them); a child (whichever thread forked it) gets the handlers back, one sent
to it before then sent again there. A fork made in the wait (by a handler of another signal)
waits for nothing and takes no lock: its child is `sqlite_unsafe`; the waiting fork keeps its
own. The objects are held weakly; a registration
and a fork's look at the registry take `_REGISTRY` in turn (a thread that makes a bundle while
another forks). This module owns that registry only (and, per thread, the locks a fork took and
the stop signals' handlers its wait replaced; the main thread's hold, the stops not yet sent
again); it never forks, and writes nothing but, at exit, a stop's text. Another thread's import
for warm: `warmcli.import_wait`; a fork made during one before this module is imported, the
package's own hook imports it and waits as here (`before_unhooked`). A compile's scratch
folder: `warmcli.scratch`.
"""

from __future__ import annotations

import _thread
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable
from contextlib import suppress
from types import FrameType
from typing import Any

from warmcli.import_wait import importing_elsewhere

HOLD_SECONDS = 5.0  # the most a fork waits for another thread's import and the `held` locks, in all
_ROUNDS = 4  # the most times a fork lists them (a thread may open bundle after bundle)

_RLOCK = type(threading.RLock())
_RENEWED: weakref.WeakKeyDictionary[Any, tuple[str, ...]] = weakref.WeakKeyDictionary()
_HELD: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_taken = threading.local()  # per forking thread: the held locks its fork took, one `missed`
_UNSAFE = [False]  # this process was forked past a held lock (`sqlite_unsafe`); per fork: `_taken`
_REGISTRY = threading.RLock()  # around each change of `_RENEWED` and `_HELD`, and a fork
_HOLDING: list[Any] = [None]  # the main thread's hold in progress (its `_taken.stops`)
_UNSENT: dict[int, tuple[Any, Any]] = {}  # a stop a hold noted, not sent again: (answer, handler)
_STOPPED: list[BaseException] = []  # what a handler raised in Python's end (`_answer`)
_UNSENT_LOCK = [threading.Lock()]  # around `_UNSENT` and its sending (new in a child)
ENDS_STOPPED: list[Callable[[BaseException], object]] = []  # `warmcli.bundle.waiting` puts
# here `warmcli.interrupted.end_as_stopped` (not imported here): none, `_stops_at_exit` raises
_AT_EXIT = [False]  # `_stops_at_exit` registered


def new_lock(owner: Any) -> threading.Lock:
    """A new `threading.Lock` for `owner._lock`, renewed in a forked child."""
    renew_on_fork(owner)
    return threading.Lock()


def new_rlock(owner: Any, *, held: bool = False) -> threading.RLock:
    """A new `threading.RLock` for `owner._lock`, renewed in a forked child (`held`: and
    taken around a fork, see the module doc)."""
    renew_on_fork(owner)
    if held:
        with _REGISTRY:
            _HELD[owner] = "_lock"
    return threading.RLock()


def renew_on_fork(owner: Any, *names: str) -> None:
    """In a forked child, replace `owner`'s locks named `names` (default `_lock`) with new
    ones of the same kind (`threading.Lock` or `threading.RLock`)."""
    with _REGISTRY:
        _RENEWED[owner] = names or ("_lock",)


def _before() -> None:
    """Before a fork: let another thread's import end, then take the held locks, waiting
    `HOLD_SECONDS` at most in all; then `_REGISTRY`, held across the fork (the child's
    `_RENEWED` whole). The held locks are listed again until no new one is registered (a
    bundle another thread opened while they were waited for: its SQLite work is waited for
    too), up to `_ROUNDS` times within the same time."""
    if _nested():  # (waits for nothing, takes no lock: its child is `sqlite_unsafe`)
        _REGISTRY.acquire()
        return
    _hold_stops()  # (a stop sent as it forks has its handler run in `_after_in_parent`)
    deadline = time.monotonic() + HOLD_SECONDS
    _imports_ended(deadline)  # first: the import may lead to a bundle made and written
    _taken.missed = False
    taken = _taken.__dict__.setdefault("locks", [])
    seen: dict[int, Any] = {}  # the owners whose lock was waited for (kept: no id reused)
    for _ in range(_ROUNDS):
        with _REGISTRY:  # another thread may be registering (a new bundle)
            held = [(o, n) for o, n in _HELD.items() if id(o) not in seen]
        for owner, name in held:
            seen[id(owner)] = owner
            lock = getattr(owner, name, None)
            if lock is not None and (lock.acquire(blocking=False) or _waited_for(lock, deadline)):
                taken.append(lock)
            elif lock is not None:  # another thread in SQLite still: the child must not be
                _taken.missed = True  # (this thread's fork's: another's may run at once)
        _imports_ended(deadline)  # and again: one begun while the locks were waited for
        _REGISTRY.acquire()
        if len(_HELD) <= len(seen) or time.monotonic() >= deadline or _stop_came():
            break
        _REGISTRY.release()  # one registered meanwhile: waited for too (a few rounds)
    else:
        _REGISTRY.acquire()
    taken.append(_REGISTRY)  # released with the rest (not if an interrupt came before it)


def before_unhooked(aside: dict[int, Any] | None = None, noted: list[int] | None = None) -> None:
    """`_before`, for a fork the package's hook (`warmcli._before_fork`) imported this module
    in, another thread importing for warm (its `_after_in_parent`, `_renew` end the fork);
    `aside`: the stop handlers that hook set aside as it did, `noted`: stops meanwhile."""
    _hold_stops(aside or {})
    if (held := _taken.__dict__.get("stops")) is not None:
        held[2].extend(noted or ())  # (as if noted in the wait: the fork goes on at once)
    _before()


def _imports_ended(deadline: float) -> None:
    """Wait, until `deadline` at most, for no other thread to be importing for warm."""
    while importing_elsewhere() and time.monotonic() < deadline and not _stop_came():
        _hold_stops()
        time.sleep(0.001)


def _waited_for(lock: Any, deadline: float) -> bool:
    """`lock` taken, waiting until `deadline` at most, or until a stop signal comes (held
    meanwhile, `_hold_stops`: the fork goes on at once, as `missed`, and the stop is answered
    as it returns)."""
    _hold_stops()
    while (left := deadline - time.monotonic()) > 0 and not _stop_came():
        if lock.acquire(timeout=min(left, 0.05)):
            return True
    return False


def _stop_came() -> bool:
    """Whether a stop signal came during this fork's wait (`_hold_stops`)."""
    held = _taken.__dict__.get("stops")  # (or one not yet sent again: no wait for a stopping
    return bool(_UNSENT) or (held is not None and bool(held[2]))  # process's next fork)


def _hold_stops(aside: dict[int, Any] | None = None) -> None:
    """Before a main thread's fork (once a fork): SIGINT's, SIGTERM's and SIGHUP's Python
    handler (or that set `aside`) replaced by one noting it, till the fork returns: run in the
    fork's function (its wait, `_after_in_parent`), what it raised (`KeyboardInterrupt`) was only
    printed ("Exception ignored in ...") and lost. One noted ends the wait; `_let_stops_go`."""
    if "stops" in _taken.__dict__ or threading.current_thread() is not threading.main_thread():
        return
    import signal

    came: list[int] = []
    mine: list[int] = []  # a forked child's own, noted there before `_renew` set its handlers
    pid = os.getpid()

    def note(signum: int, frame: Any) -> None:
        (came if os.getpid() == pid else mine).append(signum)

    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    got = {s: (aside or {}).get(s, signal.getsignal(s)) for s in stops}  # (not a hold's)
    replaced = {s: h for s, h in got.items() if callable(h) and not hasattr(h, "_warm_replaced")}
    _taken.stops = _HOLDING[0] = (replaced, note, came, _aside() if replaced else None, mine)
    _swap({s: note for s in replaced})


def _let_stops_go(parent: bool) -> None:
    """After the fork: the handlers `_hold_stops` replaced set back (in a child, the main
    thread's hold's, whichever thread forked: else noting every stop for ever); each stop noted
    (in a child, one sent to it since the fork, else dropped: it ran on) sent again by a thread
    (`_send_again`), `_answer` standing in till then."""
    held = _taken.__dict__.pop("stops", None)
    if not parent:
        held, _HOLDING[0] = held or _HOLDING[0], None
        _UNSENT.clear(), _STOPPED.clear()  # (the parent's to send)
        _UNSENT_LOCK[0] = threading.Lock()
    elif held is not None:
        _HOLDING[0] = None
    if held is None:
        return
    replaced, note, came, wakeup, mine = held
    import signal

    came = dict.fromkeys(came if parent else mine)  # (a child's: those sent to it, not inherited)
    answers = {s: _answer(h) if s in came else h for s, h in replaced.items()}
    _swap({s: h for s, h in answers.items() if signal.getsignal(s) is note})
    if wakeup is not None:
        _pass_on(*wakeup, came if parent else None)  # (a child's are its parent's)
    for signum in came:
        with _UNSENT_LOCK[0]:
            _UNSENT[signum] = (answers[signum], replaced[signum])
        if not _AT_EXIT[0]:
            import atexit

            atexit.register(_stops_at_exit)  # (after the program's own: run before them)
            _AT_EXIT[0] = True
        try:
            _thread.start_new_thread(_send_again, (signum,))
        except RuntimeError:  # no thread to be had: answered here, as before
            _send_again(signum)


def _aside() -> tuple[int, int, int] | None:
    """The wakeup fd (`signal.set_wakeup_fd`, asyncio's loop's) set aside for a pipe of the
    hold's: a stop noted, then sent again, wrote it twice (answered twice); `_pass_on`."""
    import signal

    fd = signal.set_wakeup_fd(-1)
    try:
        read, write = os.pipe() if fd != -1 else (-1, -1)  # (not inherited by an exec)
        for end in (read, write) if fd != -1 else ():
            os.set_blocking(end, False)
    except OSError:  # (no descriptor left: left as it was)
        read = write = -1
    signal.set_wakeup_fd(fd if write == -1 else write, warn_on_full_buffer=write == -1)
    return None if write == -1 else (fd, read, write)


def _pass_on(fd: int, read: int, write: int, came: dict[int, None] | None) -> None:
    """The wakeup fd set back, and what the signals the hold did not note (each once sent
    again) wrote meanwhile passed on. Python cannot say its `warn_on_full_buffer`: True where it
    is asyncio's running loop's (asyncio's default), else False (trio's, uvloop's: True would
    print a traceback for each signal a full buffer drops)."""
    import signal

    loop = getattr(sys.modules.get("asyncio.events"), "_get_running_loop", lambda: None)()
    asyncio = getattr(getattr(loop, "_csock", None), "fileno", lambda: -1)() == fd
    with suppress(ValueError, OSError):
        signal.set_wakeup_fd(fd, warn_on_full_buffer=asyncio)
        if came is not None and (passed := bytes(b for b in os.read(read, 4096) if b not in came)):
            os.write(fd, passed)
    os.close(read)
    os.close(write)


def _answer(handler: Any) -> Callable[[int, Any], None]:
    """The handler standing for `handler` until a noted stop is sent again: `handler` set back
    and called; in `threading`'s end (the main code ended first), what it raises (only printed
    there) kept to end the process at exit (`_stops_at_exit`)."""

    def answer(signum: int, frame: Any) -> None:  # (a stop sent since, or the one sent again)
        if _in_fork(frame):  # (a pre-fork loop's next, or 3.13's fork warning): once out
            with _UNSENT_LOCK[0]:
                _UNSENT[signum] = (answer, handler)
            _thread.start_new_thread(_send_again, (signum,))
            return
        _set_back(signum, answer, handler)
        if not _within(frame, getattr(sys.modules.get("threading"), "_shutdown", None)):
            handler(signum, frame)
            return
        try:
            handler(signum, frame)
        except (KeyboardInterrupt, SystemExit) as stop:
            _STOPPED.append(stop)

    return answer


def _set_back(signum: int, answer: Any, handler: Any) -> None:
    import signal

    if signal.getsignal(signum) is answer:
        _swap({signum: handler})


def _nested() -> bool:
    """Whether the fork whose hook calls this was made in a signal handler that a fork's wait
    ran (in `_before`): that fork's locks and hold are its own, released and let go by it."""
    return _within(sys._getframe(1).f_back, _before)  # (the fork's caller on)


def _within(frame: FrameType | None, *functions: Any) -> bool:
    """Whether `frame` is in a call of one of `functions` (`threading._shutdown`: the main code
    ended; `_before`, `_after_in_parent`: a fork's, where what a handler raises is printed)."""
    codes = [getattr(function, "__code__", None) for function in functions]
    while frame is not None and frame.f_code not in codes:
        frame = frame.f_back
    return frame is not None


def _in_fork(frame: FrameType | None) -> bool:
    """Whether `frame` is in a fork's functions, where what a handler raises is only printed
    (`_before`, `_after_in_parent`) or dropped: 3.13's `os.fork` shows its warning of a
    multi-threaded fork (`warnings._showwarnmsg`) after `_after_in_parent` and drops what is
    raised there (a Ctrl-C sent again as the warning was shown was lost)."""
    shown = getattr(sys.modules.get("warnings"), "_showwarnmsg", None)
    return _within(frame, _before, _after_in_parent, shown)


def _send_again(signum: int) -> None:
    """Send `signum` to this process again, if not yet sent, once the main thread is out of the
    fork's functions (in them, what the handler raises is only printed: a next fork's too)."""
    main, frames = threading.main_thread(), getattr(sys, "_current_frames", dict)
    while main is not threading.current_thread() and _in_fork(frames().get(main.ident)):
        time.sleep(0.0005)
    with _UNSENT_LOCK[0]:
        if _UNSENT.pop(signum, None) is not None:
            os.kill(os.getpid(), signum)


def _stops_at_exit() -> None:
    """At exit: a stop `_answer` kept, else each one not sent again before the main code ended
    sent now, its handler set back and run here; what it raises ends the process as it would
    have ended the main code (a traceback shown, a code's text written, as Python does)."""
    try:
        if _STOPPED:
            raise _STOPPED.pop()
        with _UNSENT_LOCK[0]:
            unsent = list(_UNSENT.items())
            _UNSENT.clear()
        for signum, (answer, handler) in unsent:
            _set_back(signum, answer, handler)
            os.kill(os.getpid(), signum)  # (its handler runs at once, in this thread)
    except (KeyboardInterrupt, SystemExit) as stop:
        if not ENDS_STOPPED:
            raise
        if isinstance(stop, KeyboardInterrupt):  # shown, and noted as the main code's end
            shown = {"last_type": type(stop), "last_value": stop, "last_exc": stop}
            vars(sys).update(shown, last_traceback=stop.__traceback__)
            sys.excepthook(type(stop), stop, stop.__traceback__)
        for end in ENDS_STOPPED:  # (a code's text written there)
            end(stop)


def _swap(handlers: dict[int, Any]) -> None:
    """Install `handlers` with their signals blocked in this thread meanwhile."""
    import signal

    before = signal.pthread_sigmask(signal.SIG_BLOCK, handlers)
    try:
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def sqlite_unsafe() -> bool:
    """Whether this process was forked (or its parent, so) while another thread held a
    bundle's SQLite lock past `HOLD_SECONDS`: SQLite may not be used here (module doc)."""
    return _UNSAFE[0]


def _after_in_parent() -> None:
    if _nested():  # (the waiting fork's locks and hold left to it)
        _REGISTRY.release()
        return
    _taken.missed = False
    taken = _taken.__dict__.get("locks", [])
    while taken:
        taken.pop().release()
    _let_stops_go(True)


def _renew() -> None:
    """After a fork, in the child: every registered lock anew."""
    global _REGISTRY
    _REGISTRY = threading.RLock()  # the forking thread's, taken in `_before`
    missed = getattr(_taken, "missed", False)  # (the forking thread's)
    _UNSAFE[0] = _UNSAFE[0] or missed or _nested()
    _taken.missed = False
    _taken.__dict__.get("locks", []).clear()
    _let_stops_go(False)
    for owner, names in list(_RENEWED.items()):
        for name in names:
            held = getattr(owner, name, None)
            if held is not None:
                fresh = threading.RLock() if isinstance(held, _RLOCK) else threading.Lock()
                setattr(owner, name, fresh)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before, after_in_parent=_after_in_parent, after_in_child=_renew)
HOOKED = True  # its fork hooks wait for another thread's import (the package's hook: no more)
