"""The stop signals of a process a pass's workload forks (a pool's worker): Python's own again as
the fork returns, as without warm.

`warm run`'s worker answers SIGINT, SIGTERM and SIGHUP with a Python handler of its own
(`warmcli.warming.isolation.interrupt_on_signals`), and Python runs a handler only between two
bytecodes: a child that inherited it and was signalled just before it waited in C (a pool's
worker that `Pool.terminate` sent SIGTERM as it went to wait on its queue's lock) waited for
ever, where Python's SIGTERM ends it. `watch(handler)` names that handler; around each fork the
three signals are blocked in the forking thread (`os.register_at_fork`), and in the child each
one the handler answers is set back (SIGTERM and SIGHUP to their default action, SIGINT to
`KeyboardInterrupt`) before they are unblocked: one sent meanwhile is delivered then, as Python
would deliver it. One the parent was sent meanwhile is taken there and sent again by a thread
of its own (`warmcli.interrupted.send_again`), so that it is answered once the fork has
returned: unblocked in the at-fork function, its handler's `KeyboardInterrupt` was raised in
it, where Python only prints it ("Exception ignored"), and the stop was lost. Its only state is
that handler and the signal masks of the forks under way; it never prints.
"""

from __future__ import annotations

import _thread
import os
import signal
from typing import Any

from warmcli.interrupted import send_again
from warmcli.warming.stop_signals import STOPS

_HANDLER: list[Any] = []  # `interrupt_on_signals`' handler, in the process that installed it
_MASKS: dict[int, set[signal.Signals]] = {}  # each forking thread's mask before the fork


def watch(handler: Any) -> None:
    """Have each child this process forks from now on answer the stop signals `handler` answers
    here as Python would."""
    _HANDLER[:] = [handler]


def _before() -> None:
    if _HANDLER:
        _MASKS[_thread.get_ident()] = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)


def _after(child: bool) -> None:
    mask = _MASKS.pop(_thread.get_ident(), None)
    if mask is None:
        return
    if child:  # (the child's only thread: the other forks under way are not its)
        _MASKS.clear()
        for stop in STOPS:
            if _HANDLER and signal.getsignal(stop) is _HANDLER[0]:
                python = signal.default_int_handler if stop == signal.SIGINT else signal.SIG_DFL
                signal.signal(stop, python)
        _HANDLER.clear()
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        return
    takes = hasattr(signal, "sigtimedwait")  # (not on macOS: answered here, as before)
    held = [s for s in STOPS if takes and s in signal.sigpending() and s not in mask]
    for stop in held:  # (taken: unblocked here, its handler would raise inside this function)
        signal.sigtimedwait([stop], 0)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    for stop in held:
        if not send_again(stop):
            os.kill(os.getpid(), stop)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before,
        after_in_parent=lambda: _after(False),
        after_in_child=lambda: _after(True),
    )
