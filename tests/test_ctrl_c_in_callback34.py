"""A Ctrl-C that lands in importlib's weakref callback (a module lock collected while
`warm` still imports, its first ~100 ms) was raised there, where Python only prints it:
`Exception ignored in: <function _get_module_lock.<locals>.cb ...>` and a traceback, and
the command went on. The handler sends the signal again, to be handled once the callback
has returned (by a thread: sent from the handler, Python would handle it at once, still in
the callback: `test_review35`). (The handler given a stand-in of that callback's frame.)"""

from __future__ import annotations

import signal
import time
import types

import pytest

from warmcli.__main__ import _on_ctrl_c


def _fake_frame(name: str, filename: str) -> object:
    code = types.SimpleNamespace(co_name=name, co_filename=filename)
    return types.SimpleNamespace(f_code=code)


def test_an_interrupt_in_importlibs_callback_comes_after_it() -> None:
    before = signal.signal(signal.SIGUSR1, _on_ctrl_c)
    try:
        in_callback = _fake_frame("cb", "<frozen importlib._bootstrap>")
        with pytest.raises(KeyboardInterrupt) as raised:  # the thread's may come at once
            _on_ctrl_c(signal.SIGUSR1, in_callback)  # returns: sent again (by a thread)
            for _ in range(3000):
                time.sleep(0.01)
        last = raised.tb
        while last.tb_next is not None:
            last = last.tb_next
        assert last.tb_frame.f_locals["frame"] is not in_callback  # raised out here, not there
    finally:
        signal.signal(signal.SIGUSR1, before)


def test_an_interrupt_elsewhere_is_raised_at_once() -> None:
    with pytest.raises(KeyboardInterrupt):
        _on_ctrl_c(signal.SIGINT, _fake_frame("main", "/somewhere/app.py"))
