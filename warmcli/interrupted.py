"""How a process that Ctrl-C ended still ends: by SIGINT, as CPython ends it (and one a stop
signal's `SystemExit` cut its write-back short: with the code it asks for).

CPython ends a process whose main code raised KeyboardInterrupt by SIGINT (exit status
130 in a shell, -2 to `subprocess`), so the shell and its loops know it was
interrupted, but only while no code is executed from source between that exception and
the exit: an exit handler that imports a module defining a dataclass (a write-back's
signature check) resets it, and the process then ends with status 1.
`keep_sigint_exit()`, called last in warm's exit handler, sets it again, only for a
process CPython itself would end so: its main code's own KeyboardInterrupt (that very
class, escaping the program's outermost frame), no REPL run since. The other way round,
`forget_interrupt()` clears it where a KeyboardInterrupt escaped code run from a string (a
namedtuple's, a dataclass's methods made at an import) and was caught and answered (`warm`
exits 130), which `python -m` would else end by SIGINT all the same.
A handler raising KeyboardInterrupt where Python only prints it (importlib's weakref
callback, the hit table's, warm's hooks of a fork, `in_quiet_callback`:
"Exception ignored in ...", and the program goes on) has
the signal sent again instead (`send_again`), by a thread of its own, once the main thread
has left the callback, so that it is handled then (sent from the handler, Python would
handle it at once, still inside the callback). `held_interrupts()` blocks SIGINT, SIGTERM and SIGHUP
while a step that must not be cut in two (a commit and its count, a file moved into place)
runs: one sent meanwhile is delivered as the block ends, and one sent as it swaps their
handlers once they all are (`swap_handlers`: blocked in the thread meanwhile; a child another
thread forks meanwhile gets the handlers back, its SIGTERM noted for ever else); a wait for
another process's lock to begin or commit that step (`warmcli.bundle.waiting`) asks
`held_came` and ends, the step undone, rather than hold a stop that long. A Ctrl-C that cut
warm's own exit handler short (a write-back) would leave CPython exiting 0, the stop only
printed: `end_as_stopped` ends the process by SIGINT instead (its main code's `exit()` too),
and one a stop signal's handler's failing SystemExit cut short with that code (CPython would
keep the main code's 0), once every exit handler has run. Its only state is what the holds
in progress were sent (`_HELD`) and that code (`_EndsAs`, in `sys`); it prints nothing but
such a code's text (as Python writes `sys.exit("text")`'s), and exits itself only there.
"""

from __future__ import annotations

import _thread
import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

# Evaluated from source (CPython's path for code run from a string, which records a
# KeyboardInterrupt that escapes it as the process's own) and caught here.
_RAISE = "raise KeyboardInterrupt"


def ended_by_ctrl_c() -> bool:
    """Whether the process is ending on its main code's unhandled KeyboardInterrupt: the
    last exception shown is of that class exactly (CPython's own test), it escaped the
    program's outermost frame (not one a console or a shell caught and showed), and no
    interactive prompt ran after it (`python -i`, the REPL)."""
    last = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    if type(last) is not KeyboardInterrupt or last.__traceback__ is None:
        return False
    if sys.flags.inspect or hasattr(sys, "ps1"):
        return False
    return last.__traceback__.tb_frame.f_back is None


def keep_sigint_exit() -> None:
    """When the process is ending on an unhandled KeyboardInterrupt, have CPython end it
    by SIGINT again, whatever exit handlers executed since."""
    if not ended_by_ctrl_c():
        return
    with contextlib.suppress(KeyboardInterrupt):
        exec(_RAISE)  # a constant: no outside text is executed


def end_as_stopped(stop: BaseException | None) -> None:
    """End the process as `stop`, caught in warm's exit handler, asks: a KeyboardInterrupt
    by SIGINT, as an unhandled one in the main code (the exit handlers after warm's still
    run); a failing SystemExit (a stop signal's handler's `sys.exit(1)`) with its code, once
    every other exit handler has run (`_EndsAs`): not `os._exit` now, which would skip those
    registered before warm's import, `multiprocessing`'s (its children joined or ended) and
    `logging`'s (its handlers flushed), nor the main code's status (0 where it ended
    normally), which CPython keeps for a SystemExit raised in an exit handler. A handler's
    `sys.exit()` or `sys.exit(0)` asks for 0, as it would have had in the main code: left as
    it is. A code that is no int (`sys.exit("text")`) is written to stderr first, as Python
    writes it (nothing where its `str()` fails). None: `keep_sigint_exit()`."""
    if isinstance(stop, SystemExit) and not isinstance(stop.code, int | None):
        with contextlib.suppress(Exception):
            sys.stderr.write(f"{stop.code}\n")
            sys.stderr.flush()
    if isinstance(stop, KeyboardInterrupt):
        from signal import SIGINT  # (at exit only: a serving process never imports it)

        with contextlib.suppress(KeyboardInterrupt):
            exec(_RAISE)  # a constant: no outside text is executed
        # CPython reads that note only where the main code ran to its end or raised: one
        # that raised SystemExit (`exit()` at a REPL, `sys.exit(0)`) would still end with its
        # code, so the end is made by SIGINT at the teardown too, as CPython ends the other
        sys.__dict__[_ENDS_AS] = _EndsAs(-SIGINT)
    elif isinstance(stop, SystemExit) and (status := failing_status(stop.code)) is not None:
        sys.__dict__[_ENDS_AS] = _EndsAs(status)
    else:
        keep_sigint_exit()


_ENDS_AS = "_warm_ends_as"  # where `_EndsAs` waits: `sys`, whose namespace is cleared last


class _EndsAs:
    """Ends the process with `code` (a negative one: by that signal) as it is collected:
    held by `sys` only, that is once
    CPython has run every exit handler, flushed stdout and stderr and restored the signals'
    default actions, as it tears the interpreter down (what `__del__` methods of objects
    left alive then would still do is skipped, as Python never promises them at exit). It
    ends by C's `exit`, as the process would have after the teardown: what a native library
    wrote with C's stdio is flushed, its exit functions and destructors run (`os._exit`,
    where C's is out of reach, skips them). One collected before the teardown (a program's
    own exit handler replaced it) ends nothing: the exit handlers after it still run."""

    def __init__(self, code: int) -> None:
        # (nothing read from a module's globals as it ends: they are cleared by then)
        end = _c_exit() if code >= 0 else _c_kill(-code)  # (a negative code: by that signal)
        self.code, self.end, self.tearing_down = code, end, sys.is_finalizing

    def __del__(self) -> None:
        if self.tearing_down():
            self.end(self.code)


def failing_status(code: object) -> int | None:
    """The failing status a `SystemExit` with `code` asks for, judged as CPython judges it (an
    int by its own value, whatever its class overrides; anything else, a text, `0.0`, numpy's
    `int64(0)`, 1, its text unprinted here), or None for `None` and 0: the main code's stays."""
    if code is None:
        return None
    if isinstance(code, int):
        return exit_status(number) if (number := int.__int__(code)) != 0 else None
    return 1


def exit_status(code: int) -> int:
    """The status CPython ends with for `sys.exit(code)`: C's `exit` of the code cut to a C
    int, -1 for one beyond a C long long (`SystemExit(2**70)`): 0 to 255."""
    return code & 0xFF if -(2**63) <= code < 2**63 else 0xFF


def _c_exit() -> Callable[[int], object]:
    """C's `exit` (its stdio flushed, its exit functions run), else `os._exit`."""
    try:
        import ctypes

        return ctypes.CDLL(None).exit
    except (ImportError, OSError, AttributeError, TypeError):  # (no ctypes, no C library)
        return os._exit


def _c_kill(signum: int) -> Callable[[int], object]:
    """Ends the process by `signum`, its default action restored first, as CPython ends one
    a KeyboardInterrupt ended (C's `signal`, `getpid` and `kill`, else `os.kill`): the process
    that ends, asked then (a child an exit handler after warm's forked ends itself, not its
    parent)."""
    pid, kill = os.getpid, os.kill
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        default, pid, kill = libc.signal, libc.getpid, libc.kill
    except (ImportError, OSError, AttributeError, TypeError):  # (no ctypes, no C library)
        return lambda _code: kill(pid(), signum)
    return lambda _code: (default(signum, 0), kill(pid(), signum))  # (0: SIG_DFL)


def forget_interrupt() -> None:
    """Clear CPython's note of a KeyboardInterrupt escaping code it ran from a string (see
    the module doc): it clears it as it begins to run any string, here an empty one."""
    exec("")  # (no code: the note cleared)


_HELD: list[list[tuple[int, Any]]] = []  # the signals each hold in progress was sent
_IMPORTLIB = "<frozen importlib"  # the file name of importlib's own frames
_HITS = os.path.join("warmcli", "runtime", "hits.py")  # the hit table's callback's file
# `logging`'s hooks: before 3.12, and since (`before`, `after_in_parent`), and `after_in_child`
_LOGGING_HOOKS = ("_acquireLock", "_releaseLock", "_prepareFork", "_afterFork")
_LOGGING_HOOKS += ("_after_at_fork_child_reinit_locks",)
_FORK_HOOKS = (  # the `os.register_at_fork` hooks of warm's, by file: their functions' names
    (os.path.join("warmcli", "forking.py"), ("_before", "_after_in_parent", "_renew")),
    (os.path.join("warmcli", "warming", "child_signals.py"), ("_before", "_after", "<lambda>")),
    (os.sep + "warnings.py", ("_showwarnmsg",)),  # 3.13's fork warning, shown after the hooks
    (os.path.join(os.sep + "logging", "__init__.py"), _LOGGING_HOOKS),  # once it is imported
)
_OUT_WAIT = 1.0  # the most seconds a signal sent again waits for the main thread to leave


def in_quiet_callback(frame: object) -> bool:
    """Whether a signal handler was called, at `frame` or a call it made, in a callback where
    what it raises is only printed: importlib's weakref callback (a module lock collected),
    the launch hit table's (a kernel object gone: `warmcli.runtime.hits._gone`), or a fork's
    hooks (`warmcli.forking`'s, as `warm run` forks its worker: the stop was lost there;
    `warmcli.warming.child_signals`'; and `logging`'s, once imported), or the warning of a
    multi-threaded fork that 3.13's `os.fork` shows after them (what is raised there is
    dropped: the stop was lost)."""
    while (code := getattr(frame, "f_code", None)) is not None:
        name, file = code.co_name, code.co_filename
        if (
            (name == "cb" and file.startswith(_IMPORTLIB))
            or (name == "_gone" and file.endswith(_HITS))
            or any(name in names and file.endswith(at) for at, names in _FORK_HOOKS)
        ):
            return True
        frame = getattr(frame, "f_back", None)
    return False


def send_again(signum: int) -> bool:
    """Send `signum` to this process again, from a new thread, once the main thread is out of
    the callback (`_OUT_WAIT` at most: handled once it has gone on); False when no thread can
    be started."""
    try:
        _thread.start_new_thread(_send_once_out, (os.getpid(), signum))
    except RuntimeError:
        return False
    return True


def _send_once_out(pid: int, signum: int) -> None:
    import threading
    import time

    main, deadline = threading.main_thread().ident, time.monotonic() + _OUT_WAIT
    while in_quiet_callback(sys._current_frames().get(main)) and time.monotonic() < deadline:
        time.sleep(0.0005)
    os.kill(pid, signum)


@contextlib.contextmanager
def held_interrupts() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP held while what runs inside completes, then answered as
    their handler answers them (`KeyboardInterrupt`): one landing there (a commit's last
    step) would say "interrupted" of a change that was kept. Held by a handler of its own
    for the while, not by a signal mask: a signal sent to the process is delivered to any
    of its threads that does not block it (a library's native thread), and Python runs
    the handler in the main thread all the same. Outside the main thread, or where a
    signal has no Python handler (ignored, or its default action), nothing is held."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    came: list[tuple[int, Any]] = []
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    handlers = {s: signal.getsignal(s) for s in stops}
    held = {s: h for s, h in handlers.items() if callable(h)}
    hold = {s: _holding(came, h) for s, h in held.items()}
    swap_handlers(hold)
    _HELD.append(came)
    try:
        yield
    finally:
        _HELD.remove(came)
        swap_handlers(held)
        if came:  # the first one, as it would have been answered
            signum, frame = came[0]
            held[signum](signum, frame)


def _holding(came: list[tuple[int, Any]], replaced: Any) -> Callable[[int, Any], None]:
    """A hold's handler: notes the signal in `came`; `replaced` is the handler it stands for."""

    def hold(signum: int, frame: Any) -> None:
        came.append((signum, frame))

    hold._warm_replaced = replaced  # type: ignore[attr-defined]
    return hold


def _forked() -> None:
    """In a child forked (by another thread) while a hold was in progress, a hold that never
    ends there: the handlers it replaced set back, the hold forgotten."""
    if not _HELD:
        return
    import signal

    _HELD.clear()
    for stop in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        replaced = getattr(signal.getsignal(stop), "_warm_replaced", None)
        if replaced is not None:
            with contextlib.suppress(ValueError, OSError):  # (not the child's main thread)
                signal.signal(stop, replaced)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def held_came() -> bool:
    """Whether a stop signal came while a hold in progress holds it (`held_interrupts`), asked
    in the main thread (the one that holds)."""
    import threading

    return any(_HELD) and threading.current_thread() is threading.main_thread()


def swap_handlers(handlers: dict[int, Any]) -> None:
    """Install `handlers` (signal -> Python handler) together: their signals blocked in
    this thread meanwhile, so that one sent as they are swapped (its handler raising
    between two `signal.signal` calls would leave the others swapped for good, a later
    Ctrl-C swallowed) is answered once all are in, by the handler then installed. One that
    another thread of the process takes (a native thread not blocking it) is not held so:
    Python answers it in this thread at once, maybe between two swaps, as before."""
    import signal

    before = signal.pthread_sigmask(signal.SIG_BLOCK, ())  # (one pending answered here)
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, handlers)
        for stop, handler in handlers.items():
            signal.signal(stop, handler)
    finally:  # one sent meanwhile is answered here, as the mask is set back
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
