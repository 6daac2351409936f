"""Review of stop 34's merged change: what its late parts left open, each with real parts.

- A Ctrl-C landing in importlib's weakref callback was to be sent again and handled once
  the callback returned; but `signal.raise_signal` handles the signal it sends at once,
  in the handler's own frame, so the second `KeyboardInterrupt` was raised inside the
  callback all the same: `Exception ignored in: <function cb ...>`, a traceback, and the
  command went on (the test of it blocked the signal, which no Ctrl-C does).
"""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

# A weakref callback compiled as importlib's `cb`, a SIGINT arriving while it runs.
_IN_CALLBACK = """
import os, signal, time, weakref
from warmcli.__main__ import _on_ctrl_c
signal.signal(signal.SIGINT, _on_ctrl_c)
source = "def cb(ref):\\n    os.kill(os.getpid(), signal.SIGINT)\\n    len('x')\\n"
scope = {"os": os, "signal": signal}
exec(compile(source, "<frozen importlib._bootstrap>", "exec"), scope)
class Lock: pass
lock = Lock()
ref = weakref.ref(lock, scope["cb"])
try:
    del lock
    for _ in range(3000):  # the signal sent again lands here, once the callback returned
        time.sleep(0.01)
    print("not interrupted")
except KeyboardInterrupt:
    print("interrupted after the callback")
"""


def test_a_ctrl_c_in_importlibs_callback_is_raised_once_it_has_returned() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _IN_CALLBACK],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert "Exception ignored" not in done.stderr, done.stderr
    assert done.stdout.strip() == "interrupted after the callback", done.stdout + done.stderr
