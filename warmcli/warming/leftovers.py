"""What a workload's entry leaves when it returns or raises, and how its errors are named.

A thread the entry started and left running (one it starts meanwhile, a task it left to a
thread or process pool; not an idle pool) is waited for, as Python waits before a process
ends (`join_left`); an exception one does not catch ends it as under Python, said in one
line, a note of the pass (`ThreadRaised`; a failure of the pass where only the pass ended it:
a discarded read, a GPU-less pre-build's want of a GPU, one an error rose from, or one of an
exception group's), not Python's traceback; a process the entry forked that returns or
raises out of it ends there (`forked_child_ends`; one forked at its import, as that import
ends: `import_ends_forked_child`), never running warm's passes beside its parent, nor its
exit functions (a `multiprocessing` child's neither: a parent's `TemporaryDirectory` is not
removed under it); the pools and managers of `multiprocessing` it left are ended as the
worker ends (`end_pools`), as Python ends them, their folders in `TMPDIR` removed; its exit
functions (a process pool's shutdown first, as Python's; `atexit`'s, and the `weakref.finalize`
ones a `tempfile.TemporaryDirectory` makes) run once as the worker ends (`run_exit_functions`),
as Python runs them, only the workload's: those the worker inherited from its supervisor by the
fork are forgotten there (`forget_inherited`). `first_line` and `where` name an exception of
the workload: its first line (`named`: after its kind; or its message on one line, `said_of`;
`ThreadRaised.rose_from` the pass's refusal it rose from or holds, else a group's first, after it),
and the `file:line` in the workload's file where it rose (else in the user's own code: a
package the file imports); `argparse_hint` what to do where its `sys.exit` is argparse's
parsing no arguments (sys.argv's). `stdout_reader_gone` tells a `| head` whose reader left (the
worker ends on it with exit 1, as Python does, at the workload's import too: `import_raised`, what
an import that raised raises in the worker, a `sys.exit` of the workload's own stop signal handler
a stop: `warmcli.warming.stop_signals`). No state; it never runs a workload's entry itself (only
the exit functions the workload left, in the worker). It writes on stderr only where Python would,
in a process of the workload's: a forked child's last words, and one line for an exit function that
raised (in the worker, within the output its caller names: `warmcli.warming.isolation`); else a
note of the pass.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
import traceback
import weakref
from pathlib import Path
from typing import Any

from warmcli.errors import (
    CompileFailure,
    DeviceError,
    DiscardedReadError,
    KernelCompileError,
    TuneFailure,
    WorkloadError,
    arrived_refused,
    message_of,
)
from warmcli.execution.process_mode import note_reported
from warmcli.interrupted import exit_status, failing_status
from warmcli.pool_tasks import ended_by_refused, found_in
from warmcli.printable import cut, printable
from warmcli.runtime.users_code import users_file
from warmcli.warming.crashes import exit_function_name, threading_exit_function
from warmcli.warming.stop_signals import stopped_by_signal


def first_line(exc: BaseException) -> str:  # cut: a 20 MB note in each pass took 640 MB
    text = message_of(exc).strip()
    return cut(text.splitlines()[0], 4096) if text else ""


def said_of(exc: BaseException) -> str:
    """`exc`'s message on one line, each control in it escaped (`printable`: a newline, an
    escape code), a user's and warm's own alike (a `BundleError` names a path a newline may
    be in); but a compile error's, whose log keeps its lines beneath (its first line, naming
    the kernel, escaped), and a `TuneFailure`'s, each failed candidate on a line (`- name:
    why`) beneath its first, each line escaped (a key's text may hold a newline)."""
    text = message_of(exc).strip()
    if isinstance(exc, TuneFailure):
        return "\n- ".join(printable(line) for line in text.split("\n- "))
    if not isinstance(exc, (KernelCompileError, CompileFailure)):
        return printable(text)
    head, _, log = text.partition("\n")
    return printable(head) + ("\n" + log if log else "")


def named(kind: str, message: str) -> str:
    """An exception said as Python's traceback ends: `Kind: message`, its kind (escaped: a
    made class's may hold a newline) alone where it has no message (`queue.Empty()`)."""
    return f"{printable(kind)}: {message}" if message else printable(kind)


_PARSES = ("parse_known_args", "_parse_known_args2")  # the latter: Python 3.13's


def argparse_hint(exc: SystemExit) -> str:
    """The hint for a `sys.exit` argparse made parsing no arguments (a required option):
    `sys.argv` holds only the workload's path under warm. Not for a parse of a list of the
    workload's own, nor its own `parser.error` after a parse: sys.argv is not their cause."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames or os.path.basename(frames[-1].filename) != "argparse.py":
        return ""
    parsed = []  # what each of argparse's parse frames was given (None: sys.argv[1:])
    for frame, _ in traceback.walk_tb(exc.__traceback__):
        code = frame.f_code
        if code.co_name in _PARSES and os.path.basename(code.co_filename) == "argparse.py":
            parsed.append(frame.f_locals.get("args", ()))
    if not parsed or any(args not in (None, []) for args in parsed):
        return ""
    return (
        " (argparse exits: warm runs the workload with sys.argv holding only its path; give "
        "its settings in environment variables, or warm a module of your own that sets them "
        "and calls it)"
    )


def where(exc: BaseException, path: Path | None) -> str:
    """`file:line: ` of the innermost frame in the workload's file, else in the user's code
    (a workload the file imports from the user's package: `app/warmup.py`, not the line of
    numpy's or argparse's that raised for it), else of the raise."""
    frames = traceback.extract_tb(exc.__traceback__)
    resolved = str(path.resolve()) if path is not None else None
    mine = [f for f in frames if f.filename == resolved]
    users = [f for f in frames if users_file(f.filename) and not _warms(f.filename)]
    frame = (mine or users or frames or [None])[-1]
    return f"{frame.filename}:{frame.lineno}: " if frame else ""


_WARM_FOLDER = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "")


def _warms(filename: str) -> bool:
    """Whether `filename` is one of warm's own modules (a checkout's too: not the user's)."""
    return os.path.realpath(filename).startswith(_WARM_FOLDER)


class ThreadRaised:
    """Python's hook for an exception a thread of the entry did not catch, said in one line
    (a note of the pass: where in the workload, its type, its first line) instead of
    Python's traceback through warm's frames; the entry goes on without the thread, as
    under Python (what it did not reach is named by the verify pass). But a thread ended by
    what only this pass refuses (a discarded read; in a GPU-less pre-build, anything that
    needs a GPU: a `DeviceError`) would not end on a GPU, so the pass is no run of the
    workload: `ended` fails it with that thread's line (one raised from it too), as the entry's."""

    def __init__(self, pass_name: str, path: Path, gpu_less: bool) -> None:
        self.pass_name, self.path, self.gpu_less = pass_name, path, gpu_less
        self.failed: str | None = None  # the first such thread's name and line
        ended_by_refused()  # (an earlier pass's pool tasks forgotten)
        arrived_refused()  # (and its process pools')

    def __call__(self, args: Any) -> None:
        if args.exc_type is SystemExit and self._refused(args.exc_value) is None:  # silently,
            return  # as Python's hook ends it (not a `sys.exit` while handling the pass's own)
        exc = args.exc_value
        said = named(args.exc_type.__name__, first_line(exc)) if exc is not None else ""
        if exc is not None:
            said = where(exc, self.path) + said
        name = printable(args.thread.name) if args.thread is not None else "?"
        if self._refused(exc) is not None:  # (one raised from it, or while handling it, too)
            self.failed = self.failed or f" in thread {name}: {said}{self.rose_from(exc)}"
            return
        note_reported(
            f"thread {name} raised during {self.pass_name}, and the workload went on without "
            f"it: {said}{_holds(exc, self.path)}"
        )

    def _refused(self, exc: BaseException | None) -> BaseException | None:
        """What only this pass refuses in `exc`'s chain (what it rose from or in), or a group's."""
        kinds = (DiscardedReadError, DeviceError) if self.gpu_less else DiscardedReadError
        return found_in(exc, lambda each: isinstance(each, kinds))

    def rose_from(self, exc: BaseException) -> str:
        """What only this pass refuses that `exc` rose from or holds, said after its line
        (` (raised from DiscardedReadError: ...)`), the entry's or a thread's: the refusal
        and what lets it go on, never a bare `ExceptionGroup` of a `TaskGroup`; else ""."""
        refused = self._refused(exc)
        if refused is None:  # a group (a `TaskGroup`'s) names what it holds first, and where
            return _holds(exc, self.path)
        if refused is exc:
            return ""
        how = "holding" if isinstance(exc, BaseExceptionGroup) else "raised from"
        return f" ({how} {named(type(refused).__name__, first_line(refused))})"

    def ended(self) -> None:
        """`WorkloadError` where a thread, or a thread pool's task whose future nobody read
        (`warmcli.pool_tasks`), was ended by what only this pass refuses."""
        task, pool = ended_by_refused(), "thread"  # (every note forgotten, whatever this pass)
        if (arrived := arrived_refused()) is not None and task is None:
            task, pool = arrived, "process"  # (pickled: no traceback of where it rose)
        if self.failed is None and task is not None and self.gpu_less:
            said = where(task, self.path) + named(type(task).__name__, first_line(task))
            self.failed = f" in a task of a {pool} pool: {said}"
        if self.failed is not None:
            raise WorkloadError(f"workload raised during {self.pass_name}{self.failed}")


def _holds(exc: BaseException | None, path: Path) -> str:
    """` (holding w.py:7: LaunchError: ...)`: a group's first exception (first's first), or ""."""
    held, depth = exc, 0
    while isinstance(held, BaseExceptionGroup) and held.exceptions and depth < 1024:
        held, depth = held.exceptions[0], depth + 1
    if held is exc or held is None or isinstance(held, BaseExceptionGroup):
        return ""
    return f" (holding {where(held, path)}{named(type(held).__name__, first_line(held))})"


def join_left(running: set[threading.Thread]) -> None:
    """Wait, as Python does before a process ends, for each non-daemon thread the entry started
    and left running, those they start and the tasks it left to a thread or process pool (Python's
    exit runs them): what they launch is part of the pass; not for an idle pool worker or manager
    (Python's exit stops those) nor warm's threads (compile workers, `_own`; daemons), but for a
    workload's `warm-...`. With no other thread left (most passes): no second look, no 1ms sleep."""
    pools = sys.modules.get("concurrent.futures.thread")
    workers = getattr(pools, "_threads_queues", {})  # each pool's workers (CPython 3.9 on)
    idle_code = getattr(getattr(pools, "_worker", None), "__code__", None)
    processes = sys.modules.get("concurrent.futures.process")
    managers = getattr(processes, "_threads_wakeups", {})  # each process pool's manager
    others = [t for t in threading.enumerate() if t is not threading.current_thread()]
    quiet = 0 if any(not _own(t, workers) for t in others) else 2  # (2: nothing looked for)
    while quiet < 2:  # twice nothing to wait for: a worker between two tasks is seen busy
        waited = False
        for thread in threading.enumerate():
            if thread in running or thread.daemon or thread in workers:
                continue
            if thread is threading.current_thread() or _idle(thread, managers):
                continue
            waited = True
            if not thread.is_alive():  # listed as it starts: waited for once started
                time.sleep(0.002)
            while thread.is_alive() and thread not in workers and not _idle(thread, managers):
                thread.join(0.05)  # (a pool's, once it says; a process pool's, done)
        if _pool_busy(workers, idle_code):
            waited = True
            time.sleep(0.002)
        quiet = 0 if waited else quiet + 1
        if quiet == 1:  # a moment before the second look (none after it: the loop ends)
            time.sleep(0.001)


def _own(thread: threading.Thread, workers: Any) -> bool:
    """Whether `thread` is a worker of warm's compile pool (`warmcli.backends.batch`'s)."""
    return thread in workers and thread.name.startswith("warm-compile_")


def _idle(thread: threading.Thread, managers: Any) -> bool:
    """Whether `thread` is the manager thread of a process pool with no task submitted
    and unfinished (Python's exit stops it without waiting: `_python_exit`)."""
    return thread in managers and not getattr(thread, "pending_work_items", None)


def _pool_busy(workers: Any, idle_code: Any) -> bool:
    """Whether a worker of a pool the workload left open runs a task or has one queued (an
    idle one waits in its queue's `get`, `_worker`'s own frame innermost)."""
    frames = sys._current_frames()
    for thread, queue in list(workers.items()):
        if not thread.is_alive() or _own(thread, workers):
            continue
        if thread is threading.current_thread():
            continue
        frame = frames.get(thread.ident or 0)
        if not queue.empty() or (frame is not None and frame.f_code is not idle_code):
            return True
    return False


def stdout_reader_gone() -> bool:
    """Whether stdout (descriptor 1) is a pipe whose reader went away: `poll` says POLLERR."""
    import select

    try:
        poller = select.poll()
        poller.register(1, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, AttributeError, ValueError):  # no `poll` (Windows), no descriptor 1
        return False


def forked_child_ends(parent: int, end: int | BaseException, said: str = "") -> None:
    """A process the workload forked that returned (or raised, `end` 1) out of its entry
    ends here, its output flushed: warm's passes and store are its parent's alone. What
    it raised is `said` on its stderr, in one line, as Python prints a dying process's
    exception (the child's own last words: no parent reports them). `end` a `SystemExit`:
    the status Python ends with for it (its code's, any int; a text's 1, the text said); a
    `KeyboardInterrupt`: ended by SIGINT, as Python ends a process on one."""
    if os.getpid() != parent:
        code = exit_status(end) if isinstance(end, int) else 1
        if isinstance(end, SystemExit):
            code = failing_status(end.code) or 0  # (judged as CPython judges it)
            if not isinstance(end.code, int | None):
                with contextlib.suppress(Exception):  # (its str() may raise: said as Python does)
                    said = said or str(end.code)
        if said:
            with contextlib.suppress(Exception):
                sys.stderr.write(printable(said) + "\n")
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        if isinstance(end, KeyboardInterrupt):
            with contextlib.suppress(Exception):
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
                os.kill(os.getpid(), signal.SIGINT)
        os._exit(code)


def import_ends_forked_child(parent: int, exc: BaseException | None, failure: str = "") -> None:
    """A process the workload forked at its import (not in its entry) ends as the import
    returns (exit 0) or raises (`exc`: `sys.exit`'s status, Ctrl-C's SIGINT, else 1, `failure`
    said in one line), as one forked in the entry does (`forked_child_ends`): it never goes
    on as a copy of the worker, into warm's passes, store and report beside its parent."""
    if exc is None:
        forked_child_ends(parent, 0)
    elif isinstance(exc, SystemExit | KeyboardInterrupt):
        forked_child_ends(parent, exc)
    else:
        forked_child_ends(parent, 1, f"warm: a process the workload forked raised: {failure}")


def import_raised(parent: int, exc: BaseException, failure: BaseException) -> BaseException:
    """What the worker raises for a workload import that raised `exc` (`failure`, its one
    line), a process it forked ended first (`import_ends_forked_child`): a print that met
    stdout's reader gone (`| head`) stays the `BrokenPipeError` the worker ends on with
    exit 1, nothing said, as in its entry; a stop signal handler's `sys.exit`, a stop."""
    if isinstance(exc, BrokenPipeError) and stdout_reader_gone():
        forked_child_ends(parent, 1)
        return exc
    import_ends_forked_child(parent, exc, str(failure))
    if isinstance(exc, SystemExit) and stopped_by_signal(exc):
        return KeyboardInterrupt()
    return failure


def end_pools() -> None:
    """What `multiprocessing` does as a process ends (`util._exit_function`, as in its own
    children before their `os._exit`): its finalizers run (the pools and managers the
    workload left ended, their folders in `TMPDIR`, a forkserver's `pymp-*`, removed) and its
    daemonic workers ended, but a process of the workload's own is not waited for (it would
    hold the worker, its stop signals ignored by then); nothing where it was never imported."""
    util = sys.modules.get("multiprocessing.util")
    if util is None:
        return
    with contextlib.suppress(BaseException):
        util._exiting = True  # type: ignore[attr-defined]
        util._run_finalizers(0)  # type: ignore[attr-defined]
        for child in util.process.active_children():  # type: ignore[attr-defined]
            if child.daemon:
                child.terminate()
                child.join()
        util._run_finalizers()  # type: ignore[attr-defined]


def forget_inherited() -> None:
    """In a worker just forked: the exit functions it inherited from its supervisor (its
    stub folder's removal, production's report) are forgotten, and the `weakref.finalize`
    objects it inherited are not run at its exit, so that only the workload's run as it
    ends (`run_exit_functions`); `logging`'s shutdown, which Python runs at any end, stays."""
    atexit._clear()
    weakref.finalize._registered_with_atexit = False  # type: ignore[attr-defined]
    for inherited in list(weakref.finalize._registry):  # type: ignore[attr-defined]
        inherited.atexit = False
    logging = sys.modules.get("logging")
    if logging is not None:
        atexit.register(logging.shutdown)


def run_exit_functions() -> None:
    """The workload's exit functions, once, as Python runs them as a process ends (last
    registered first); one that raises is said in one line on stderr (where in the user's
    code, its type, its first line) and ignored, as Python ignores it: the run's exit code
    stands. They are forgotten once run. A process pool the workload left open is shut down
    first, as Python's exit does (its `threading` exit call): its manager thread and processes
    end, which `multiprocessing`'s exit function would otherwise wait for forever. A thread
    pool's is not run: a task still running where the workload raised is not waited for."""
    hooks = sys.unraisablehook, sys.excepthook
    sys.unraisablehook = lambda r: _exit_function_raised(r.exc_value, r.object, r.err_msg)
    sys.excepthook = lambda kind, exc, tb: _exit_function_raised(exc, None)  # a finalizer's
    try:
        calls = getattr(threading, "_threading_atexits", [])
        for call in reversed(list(calls)):  # as `threading._shutdown` calls them
            made = threading_exit_function(call)  # (a `functools.partial`; 3.13: a lambda)
            if getattr(made, "__module__", "") == "concurrent.futures.process":
                calls.remove(call)
                try:
                    call()
                except Exception as exc:
                    _exit_function_raised(exc, call)
        atexit._run_exitfuncs()
    finally:
        sys.unraisablehook, sys.excepthook = hooks


def _exit_function_raised(exc: BaseException | None, function: object, msg: str = "") -> None:
    name = exit_function_name(function, msg)
    said = named(type(exc).__name__, first_line(exc)) if exc is not None else "?"
    if exc is not None:
        said = where(exc, None) + said
    with contextlib.suppress(Exception):
        sys.stderr.write(
            printable(f"warm: warning: the workload's exit function {name} raised: {said}")
            + " (ignored, as Python ignores it)\n"
        )
