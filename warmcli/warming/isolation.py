"""Crash isolation for `warm run` (and `warm verify --workload`'s replay): the passes in a worker
process that journals its work.

A candidate kernel that crashes the process (SIGSEGV, SIGBUS, an abort) must not take `warm run`
down. `run_isolated` forks a worker that does the whole run and waits for it: until it exits, or
once it has returned its code, journaled, and made its output /dev/null and closed its end of a
pipe, last of all (`_let_go`: the worker's teardown, milliseconds, is waited for only as this
process ends, `_reap`, overlapping its own). The worker journals (in files in memory
both share, a few lines long: `warmcli.warming.worker_journal`) the pass it is in, the tune
candidates it is measuring (`measuring`) and every compiler process group it starts. When the
worker dies of a crash signal while a candidate is being measured, that candidate is excluded
(`excluded`, read by the tuner through the `MeasureJournal` the worker installs into
`warmcli.runtime.tune`; the tuner records it as failed with the reason `crashed (SIGSEGV)`) and
the run starts again in a fresh worker; a crash anywhere else is returned
as a `WorkerCrash` naming the pass (`warmcli.warming.crashes`). Either way the compiler groups
the worker left are killed. The worker runs the workload's exit functions (`atexit`'s, a
`TemporaryDirectory`'s finalizer) once, as Python would as the process ends, before it returns
its code, however `work` ended (an interrupt too): only the workload's, the supervisor's it
inherited forgotten at the fork, and then ends the pools `multiprocessing` left, as Python
ends them (`warmcli.warming.leftovers`); one that ends the process (`os._exit`) or crashes it
leaves the code `work` returned, journaled before them (a crash, or an `os._exit` with a code
other than 0 and the run's, is told to `on_exit_end` as its warning line: the supervisor waits
for the status of a worker that never let go).
A supervisor started ignoring SIGCHLD (inherited from a daemon) sets it to its default while
it waits, so the kernel does not reap the worker before its status is read (the worker ignores it
again for the workload; `processes.exit_statuses_read`).
SIGINT, SIGTERM and SIGHUP sent to the supervisor are forwarded to the worker (from before its fork:
one sent as it forks is sent once it is made, `_Forward`), and the worker gets
SIGTERM if the supervisor dies (Linux), so no compiler outlives warm; once its code is decided the
worker ignores them, and nothing raised then passes its `os._exit` (a `KeyboardInterrupt` there ran
it on as the supervisor, its `atexit` functions run again with it). `interrupt_on_signals` makes
SIGINT, SIGTERM and SIGHUP stop every compiler and raise `KeyboardInterrupt` once (one landing
where Python only prints it is sent again: `warmcli.interrupted`; one the workload catches, as
pytest does, still ends the run once its entry returns: `stop_signals.stop_sent`; the workload's
own stop handler's `sys.exit` raised again as warm answers the first, a group's Ctrl-C forwarded
too, is a stop, not that exit's code; the code is 130 until the worker judged how `work` ended: a
stop cutting that short stops too; one in the exit functions after is theirs, the code stands).

State: the excluded candidates, per process (the journal's is `worker_journal`'s; and the stub
folder of `warmcli.warming.worker_names`, named before the first fork, made by a worker that needs
a stub, removed by this process at its end however the worker ends, and by the worker where this
process was killed first). The module prints nothing (the caller's `on_crash` and its exit code
do), but in the worker the traceback of an exception `work` let out (a bug: exit 1) and, within
the caller's `output`, one line for each of the workload's exit functions that raised
(`warmcli.warming.leftovers`); it never touches a bundle.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import signal
import sys
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from warmcli.backends.processes import (
    exit_statuses_read,
    kill_group,
    on_compiler,
    parent_death_signal,
    stop_compilers,
)
from warmcli.interrupted import in_quiet_callback, send_again, swap_handlers
from warmcli.warming import child_signals
from warmcli.warming.crashes import (
    CRASH_SIGNALS,
    CrashedCandidate,
    WorkerCrash,
    exit_code_line,
    exit_crash_line,
)
from warmcli.warming.leftovers import end_pools, forget_inherited, run_exit_functions
from warmcli.warming.stop_signals import STOPS, mark_stop_sent, stopped_by_signal
from warmcli.warming.worker_journal import (
    Files,
    Journal,
    arm,
    measuring,
    open_journal,
    read_journal,
    write,
)
from warmcli.warming.worker_names import make_folder, remove_folder

KILL_GRACE = 2.0  # seconds an interrupted worker has to stop before it is killed
Output = Callable[[], contextlib.AbstractContextManager[Any]]


class _State:
    excluded: dict[tuple[str, str], str] = {}  # noqa: RUF012  ((tune key, candidate) -> reason)


def excluded(tune_key: str, candidate: str) -> str | None:
    """Why this candidate is excluded from its tune (it crashed an earlier worker), or None."""
    return _State.excluded.get((tune_key, candidate))


class _WorkerJournal:
    """The tuner's `MeasureJournal` in the worker (`warmcli.runtime.tune`): candidates
    that crashed an earlier worker are excluded, each measurement is journaled."""

    excluded = staticmethod(excluded)
    measuring = staticmethod(measuring)


def _arm_parent_death(parent: int) -> None:
    """The worker gets SIGTERM (an interrupt) if the supervisor dies (Linux)."""
    parent_death_signal(signal.SIGTERM)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def _worker(
    work: Callable[[], int], journal: Files, parent: int, done: int, output: Output, mask: set[int]
) -> None:
    """In the forked worker: run `work` with the journal armed, then the workload's exit
    functions within `output`, then exit with its code, its output made /dev/null and
    `done` closed first (`_let_go`); the stop signals, blocked as it was forked, unblocked
    (`mask`) once its handlers and journal are set."""
    code, unanswered = 130, True  # until `work`'s end is judged: a stop cutting that short stops
    try:
        forget_inherited()  # first: the supervisor's exit functions are not the worker's
        for s in _heeded():  # the supervisor's handler must not run here
            signal.signal(s, signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL)
        arm(journal)
        from warmcli.runtime.tune import set_measure_journal  # only a worker measures here

        set_measure_journal(_WorkerJournal())
        on_compiler(lambda pgid, started: write("compiler", pgid=pgid, started=started))
        _arm_parent_death(parent)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # (one sent meanwhile answered now)
        code, unanswered = work(), False
    except SystemExit as exc:  # the workload's stop handler's, called again as `work` answered
        code, unanswered = _judged(exc)  # the first: a stop all the same (130, not its code)
    except KeyboardInterrupt:  # `work` said nothing of it: the supervisor says it (130)
        code, unanswered = 130, True
    except BrokenPipeError:  # stdout's reader went away (`| head`): exit 1 as Python does
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code, unanswered = 1, False
    except BaseException:
        with contextlib.suppress(OSError):
            __import__("traceback").print_exc()
        code, unanswered = 1, False
    finally:
        try:  # nothing raised from here runs on past `os._exit` (into the supervisor's code)
            with contextlib.suppress(BaseException):  # the code stands if one ends it (`os._exit`)
                write("exit", code=code, unanswered=unanswered)
            with contextlib.suppress(BaseException), output():  # as Python ends, Ctrl-C or not
                run_exit_functions()
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except (KeyboardInterrupt, SystemExit) as exc:  # a stop as its output was
                    was, (code, unanswered) = (code, unanswered), (130, True)  # written out
                    if isinstance(exc, SystemExit) and not stopped_by_signal(exc):
                        code, unanswered = was  # (a stop cutting this short is one: 130)
                except BaseException:
                    pass
            for s in _heeded():  # its code decided: the stop signals ignored (the module doc)
                signal.signal(s, signal.SIG_IGN)
            with contextlib.suppress(BaseException):  # past its exit functions: not crashed
                write("exit", code=code, unanswered=unanswered, let_go=True)
            if os.getppid() != parent:  # the supervisor was killed: its stub folder goes here
                with contextlib.suppress(BaseException):
                    remove_folder()
            _let_go(done)
            end_pools()  # what the workload's pools leave, as Python ends them
        finally:
            os._exit(code)


def _judged(exc: SystemExit) -> tuple[int, bool]:
    """A `SystemExit` out of `work`: a stop handler's a stop (130, unanswered), else its code."""
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return (130, True) if stopped_by_signal(exc) else (code, False)


def _let_go(done: int) -> None:
    """The worker's standard output and error made /dev/null (never closed: a file a workload's
    thread opens meanwhile would take their descriptors) and `done` closed, last of all: the
    supervisor (woken by `done`'s end, its code in the journal) goes on."""
    with contextlib.suppress(OSError):
        null = os.open(os.devnull, os.O_WRONLY)
        for fd in (1, 2):
            os.dup2(null, fd)
        if null > 2:
            os.close(null)
    with contextlib.suppress(OSError):
        os.close(done)


class _Forward:
    """The supervisor's handler of SIGINT, SIGTERM and SIGHUP from before the worker's fork until
    it is reaped: each sent to the worker (one that comes before its pid is known, as it forks,
    once it is), the first setting the `deadline` by which it must stop. Never raises: no worker
    is left running, no status lost to it. The fork is made with them blocked (`mask`: as they
    were), so one sent to the worker before it set its own handlers (`_worker`) waits for them
    (Python drops one its child gets before it cleared the parent's: lost, the worker killed)."""

    def __init__(self) -> None:
        self.parent, self.pid, self.came, self.mask = os.getpid(), 0, list[int](), set[int]()
        self.deadline: list[float] = []

    def __call__(self, signum: int, frame: FrameType | None) -> None:
        if not self.deadline:
            self.deadline.append(time.monotonic() + KILL_GRACE)
        if not self.pid or os.getpid() != self.parent:  # (before the fork's end: sent then)
            self.came.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signum)

    def to(self, pid: int) -> None:
        """The worker is `pid`: what came before it was known is sent to it, the stops unblocked
        here."""
        self.pid = pid
        for signum in dict.fromkeys(self.came):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)
        signal.pthread_sigmask(signal.SIG_SETMASK, self.mask)


@contextlib.contextmanager
def _forwarding() -> Iterator[_Forward]:
    """The stop signals `_Forward`ed inside (see it), blocked until the fork is made; one that
    came where no worker was forked (the fork failed) is answered as it ends, by the handler it
    replaced."""
    forward, previous = _Forward(), {s: signal.getsignal(s) for s in _heeded()}
    swap_handlers(dict.fromkeys(previous, forward))  # (from here on, no stop raises)
    forward.mask = signal.pthread_sigmask(signal.SIG_BLOCK, previous)
    try:
        yield forward
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, forward.mask)
        swap_handlers(previous)
        if forward.came and not forward.pid:
            signal.raise_signal(forward.came[0])


def _wait(
    pid: int, done: int, journal: Files, deadline: list[float]
) -> tuple[int | None, bool, Journal | None]:
    """Wait for the worker, its stops forwarded (`_Forward`, whose `deadline` is given); kill it
    if it will not stop within `KILL_GRACE` of the first. Returns its wait status, whether it was
    interrupted, and its journal where read here; None for the status where the worker let go
    (`done` ended) once its `journal` says it returned its code and ran the exit functions:
    reaped as this process ends (`_reap`)."""
    try:
        pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    except OSError:
        pidfd = None
    watched = [done] if pidfd is None else [pidfd, done]  # pidfd: readable once it exits
    try:
        while True:
            reaped, status = os.waitpid(pid, os.WNOHANG)
            if reaped:
                return status, bool(deadline), None
            if deadline and time.monotonic() > deadline[0]:
                os.kill(pid, signal.SIGKILL)
                return os.waitpid(pid, 0)[1], True, None
            ready = select.select(watched, [], [], 0.25 if pidfd is not None else 0.02)[0]
            if done in ready and not os.read(done, 1):  # its end closed (or the workload's)
                watched.remove(done)
                if (seen := read_journal(journal)).finished and seen.let_go:
                    return None, bool(deadline), seen  # (else its status: an exit function's)
    finally:
        if pidfd is not None:
            os.close(pidfd)


def _reap(pid: int) -> None:
    """A worker that let go, reaped as this process ends: never an orphan, a zombie of a
    caller that adopts them (a subreaper: a container's init, a service manager)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _kill_groups(groups: set[int]) -> None:
    for pgid in groups:
        kill_group(pgid)


def run_isolated(
    work: Callable[[], int],
    on_crash: Callable[[CrashedCandidate], None] | None = None,
    max_restarts: int = 64,
    output: Output = contextlib.nullcontext,
    on_exit_end: Callable[[str], None] | None = None,
) -> int | WorkerCrash:
    """Run `work` (returning an exit code) in a worker process; see the module doc.
    `output`: where the workload's exit functions write (its output's place in `work`);
    `on_exit_end`: told the warning line where the workload's exit functions ended a worker
    that had returned its code (a crash, an `os._exit` with another code not 0): that code
    stands.

    Returns the worker's exit code, or a `WorkerCrash` when it died of a signal outside
    a candidate's measurement (or of an interrupt it did not stop for in time), or
    exited without returning through warm (the workload called `os._exit`).
    """
    make_folder()  # here: this process removes it however the worker ends
    with exit_statuses_read() as ignored:  # (a worker's crash told: no status lost)
        for _ in range(max_restarts + 1):
            with open_journal() as journal:
                sys.stdout.flush()
                sys.stderr.flush()
                parent = os.getpid()
                done, let_go = os.pipe()  # the worker's end closed last: it let go
                with _forwarding() as forward:  # (from before the fork: none is lost as it forks)
                    pid = os.fork()
                    if pid == 0:  # pragma: no cover - the worker; its exit status is tested
                        os.close(done)
                        if ignored:  # the workload's as inherited: SIGCHLD ignored
                            signal.signal(signal.SIGCHLD, signal.SIG_IGN)
                        _worker(work, journal, parent, let_go, output, forward.mask)
                    forward.to(pid)
                    os.close(let_go)
                    try:
                        status, interrupted, read = _wait(pid, done, journal, forward.deadline)
                    finally:
                        os.close(done)
                seen = read if read is not None else read_journal(journal)
            _kill_groups(seen.groups)
            if status is None:  # it returned its code and let go: it exits with it
                atexit.register(_reap, pid)  # as this process ends, its teardown overlapped
                if seen.unanswered:
                    return WorkerCrash(signal.SIGINT, seen.during, True, seen.stored)
                return seen.code & 0xFF
            if os.WIFEXITED(status):
                if not seen.finished:  # the workload ended the process itself (`os._exit`)
                    code = os.WEXITSTATUS(status)
                    return WorkerCrash(0, seen.during, False, seen.stored, exit_status=code)
                if seen.unanswered:  # interrupted where the work could not say so (printing)
                    return WorkerCrash(signal.SIGINT, seen.during, True, seen.stored)
                ended = os.WEXITSTATUS(status)  # an exit function's `os._exit` does not change it
                if on_exit_end is not None and ended not in (0, seen.code & 0xFF):
                    on_exit_end(exit_code_line(ended))
                return seen.code & 0xFF
            number = os.WTERMSIG(status)
            if interrupted or number in STOPS:
                return WorkerCrash(number, seen.during, True, seen.stored)
            if seen.finished:  # the workload's exit functions crashed it: its code stands
                if on_exit_end is not None:
                    on_exit_end(exit_crash_line(number))
                return seen.code & 0xFF
            began = seen.candidate
            if number not in CRASH_SIGNALS or began is None:
                return WorkerCrash(number, seen.during, False, seen.stored)
            crashed = CrashedCandidate(
                number, began["operation"], began["shape"], began["candidate"], began["key"]
            )
            if (crashed.key, crashed.candidate) in _State.excluded:
                return WorkerCrash(number, seen.during, False, seen.stored)
            _State.excluded[(crashed.key, crashed.candidate)] = crashed.reason
            if on_crash is not None:
                on_crash(crashed)
        return WorkerCrash(signal.SIGSEGV, "tuning: too many candidates crashed")


def interrupt_on_signals() -> None:
    """SIGINT, SIGTERM and SIGHUP stop every compiler at once and raise `KeyboardInterrupt` (once:
    a second signal only stops compilers again, so the cleanup finishes). In a process the
    workload forked (a pool's worker) the signal does what it does without warm: it never
    stops its parent's compilers (`warmcli.warming.child_signals`: Python's own handling)."""
    raised, owner = False, os.getpid()

    def handler(signum: int, frame: FrameType | None) -> None:
        nonlocal raised
        if os.getpid() != owner:  # a child's: SIGTERM (SIGHUP) ends it, SIGINT is Python's own
            if signum == signal.SIGINT:
                raise KeyboardInterrupt
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        stop_compilers()
        mark_stop_sent()  # a workload that catches the interrupt (pytest) still stops
        if in_quiet_callback(frame) and send_again(signum):  # only printed there: later
            return
        if not raised:
            raised = True
            raise KeyboardInterrupt

    child_signals.watch(handler)
    for s in _heeded():
        signal.signal(s, handler)


def _heeded() -> list[int]:
    """SIGINT, SIGTERM and SIGHUP, less any this process was started ignoring (`nohup`, a
    background job of a non-interactive shell): those stay ignored, as Python leaves them."""
    return [s for s in STOPS if signal.getsignal(s) != signal.SIG_IGN]
