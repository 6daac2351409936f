"""Whether a workload's `sys.exit` was its own stop signal handler's (`stopped_by_signal`):
a SIGINT, SIGTERM or SIGHUP handler that exits (gunicorn's, as the README advises production
to do) stopped the process, as warm's own handler says by `KeyboardInterrupt`; any other
`sys.exit` is a workload that exits; and whether warm's own handler was sent a stop in this
process (`stop_sent`), so a stop the workload caught (pytest turns Ctrl-C's `KeyboardInterrupt`
into its `INTERRUPTED` exit code and returns) still ends the run. Split from
`warmcli.warming.leftovers`. Its one piece of state is that flag, set from a signal handler."""

from __future__ import annotations

import inspect
import itertools
import os
import signal
from types import FrameType


def stopped_by_signal(exc: SystemExit) -> bool:
    """Whether `exc` rose through a handler Python called for a stop signal (SIGINT, SIGTERM,
    SIGHUP: a `sys.exit` there, as gunicorn's, as the README advises production to do): the
    process was stopped, as warm's own handler says by `KeyboardInterrupt`, not a workload
    that exits. A handler is known as Python calls one, not by what is set now (a function,
    a method, a `functools.partial`, an object's `__call__`, one that reset its signal
    first): a frame whose arguments are a stop signal's number and the frame it interrupted
    (its caller); the same function the workload called itself is no stop."""
    tb = exc.__traceback__
    while tb is not None and not _called_for_stop(tb.tb_frame):
        tb = tb.tb_next
    return tb is not None


def _called_for_stop(frame: FrameType) -> bool:
    code, caller = frame.f_code, frame.f_back
    varargs = bool(code.co_flags & inspect.CO_VARARGS)
    if caller is None or not (code.co_argcount or varargs):
        return False
    values = frame.f_locals
    args = [values.get(name) for name in code.co_varnames[: code.co_argcount]]
    if varargs:
        extra = values.get(code.co_varnames[code.co_argcount + code.co_kwonlyargcount])
        args += list(extra) if isinstance(extra, tuple) else []
    return any(
        type(number) is int and number in STOPS and interrupted is caller
        for number, interrupted in itertools.pairwise(args)
    )


class _Sent:
    stop = False  # set by warm's handler (`mark_stop_sent`), never cleared: the run ends


def mark_stop_sent() -> None:
    """Remember that warm's handler was sent a stop signal (safe in a signal handler)."""
    _Sent.stop = True


def stop_sent() -> bool:
    """Whether warm's handler was sent SIGINT, SIGTERM or SIGHUP in this process: the run is
    stopped, whatever the workload made of the `KeyboardInterrupt` it raised."""
    return _Sent.stop


def stopped_if_sent(pid: int) -> None:
    """Raise `KeyboardInterrupt` where `stop_sent` in the process `pid` (not a child the
    workload forked since): the workload returned or raised after catching warm's stop
    (pytest returns INTERRUPTED, a warm-up raises on that code), a stop whatever else failed
    meanwhile (a thread's error), as it is where the workload does not catch it."""
    if _Sent.stop and os.getpid() == pid:
        raise KeyboardInterrupt


# What stops a run: Ctrl-C, a stop (`kill`, a container's), a hangup (a closed terminal).
STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
