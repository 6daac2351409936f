"""What ended `warm run`'s worker (`warmcli.warming.isolation`), as records its caller says in
one line: `WorkerCrash` (a signal outside any candidate, an interrupt, the workload's own
`os._exit`) and `CrashedCandidate` (a tune candidate that crashed it, now excluded), and the
signals that count as a crash; `exit_crash_line` and `exit_code_line`, the lines of its exit
functions' crash or `os._exit`; `exit_function_name`, the name said of one that raised, and
`threading_exit_function`, the function behind one of `threading`'s exit calls (each as Python
3.11 to 3.13 hands it). No
state; it never signals, forks or prints.
"""

from __future__ import annotations

import contextlib
import re
import signal

from warmcli.records import Record

CRASH_SIGNALS = frozenset(
    {signal.SIGSEGV, signal.SIGBUS, signal.SIGABRT, signal.SIGFPE, signal.SIGILL}
)


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def exit_crash_line(number: int) -> str:
    """The warning of a worker the workload's exit functions killed with signal `number`
    once the run had returned its code (journaled, the bundle stored): the code stands."""
    return (
        f"warm: warning: the workload's exit functions killed its process with "
        f"{signal_name(number)} after the run finished (ignored: the run's exit code stands)"
    )


def exit_code_line(code: int) -> str:
    """The warning of a worker the workload's exit functions ended with `os._exit(code)`,
    `code` not 0 (a failure, the exit code of a plain run), once the run had returned its
    code: that code stands."""
    return (
        f"warm: warning: the workload's exit functions ended its process with os._exit({code})"
        f" after the run finished (ignored: the run's exit code stands)"
    )


class WorkerCrash(Record, frozen=False):
    """The worker died of a signal outside any candidate's measurement, or was killed
    after an interrupt it did not stop for, or stopped for one its work did not answer
    (`interrupted`: an interrupt while the run printed, once the passes were stored)."""

    signal: int
    during: str | None = None
    interrupted: bool = False
    stored: tuple[int, int] = (0, 0)  # kernels and tunes the worker had committed
    exit_status: int | None = None  # the worker exited by itself (`os._exit`), not via warm

    @property
    def reason(self) -> str:
        if self.exit_status is not None:
            return f"exit status {self.exit_status}"
        return signal_name(self.signal)

    @property
    def what(self) -> str:
        """What ended the worker, as the start of a one-line error."""
        if self.exit_status is not None:
            return f"the workload ended the process itself ({self.reason}, e.g. os._exit)"
        if self.signal in CRASH_SIGNALS:
            return f"the workload crashed ({self.reason})"
        return f"the run was killed ({self.reason}; out of memory?)"


class CrashedCandidate(Record, frozen=False):
    """A candidate that crashed a worker, now excluded; the run starts again."""

    signal: int
    operation: str
    shape: str
    candidate: str
    key: str

    @property
    def reason(self) -> str:
        return f"crashed ({signal_name(self.signal)})"


# Python 3.13's `atexit` hands an exit function that raised to `sys.unraisablehook` with no
# object, its repr in the message instead (3.11 and 3.12: the function, a bare message).
_NAMED_IN_MESSAGE = re.compile(r"callback <(?:bound method|(?:built-in )?function) ([\w.<>]+)")


def exit_function_name(function: object, message: str | None) -> str:
    """The name said of an exit function that raised: its `__qualname__`, else the name in
    the message of an `atexit` callback that raised (3.13), else `a finalizer`."""
    name = getattr(function, "__qualname__", None)
    if name is None and function is None:
        found = _NAMED_IN_MESSAGE.search(message or "")
        name = found.group(1) if found else None
    return name or "a finalizer"


def threading_exit_function(call: object) -> object:
    """The function `threading._register_atexit` registered as `call`: a `functools.partial`'s
    (3.11, 3.12), or the one the lambda 3.13 registers holds (`func`); else `call` itself."""
    made = getattr(call, "func", None)
    if made is None:
        code, cells = getattr(call, "__code__", None), getattr(call, "__closure__", None) or ()
        with contextlib.suppress(Exception):  # (a call of some other make: itself)
            made = dict(zip(code.co_freevars, cells, strict=True))["func"].cell_contents
    return call if made is None else made
