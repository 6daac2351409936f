"""leftovers43b: the tune guard's kept buffers by identity (no weakref callback a Ctrl-C cuts
short), a runtime obtained before its bundle was closed or replaced, a pre-build's spawn
children without warm's PyCUDA stand-ins, and the forked-children note said once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, Warm

# A tune whose launch function makes a workspace every call and, on its first, an
# accumulator the app keeps, at a dead workspace's id; a KeyboardInterrupt (a signal
# handler's) raised as any tune-guard weakref callback starts, as one landing there would.
STALE_ID = """
import json, sys, numpy as np, warmcli
from warmcli import Kernel, Tunable
SRC = "void k(int *x, int *ws, long n) { ws[0] = x[0]; }"
KS = {f"c{i}": Kernel(SRC, "k", "PPl", defines={"C": i}) for i in range(2)}
ADD = Kernel("void add(int *a) { a[0] += 1; }", "add", "P")
STATE, DEAD = {}, set()
def trace(frame, event, arg):
    code = frame.f_code
    if event == "call" and code.co_filename.endswith("tune_guard.py") and (
        code.co_name == "<lambda>" and code.co_argcount > 0
    ):
        raise KeyboardInterrupt
def launch(rt, kernel, x, n, *, stream=None):
    ws = rt.buffer(1, "int32")
    rt.launch(kernel, x, ws, n, stream=stream)
    DEAD.add(id(ws))
    sys.settrace(trace)
    del ws
    sys.settrace(None)
    if "acc" not in STATE:
        STATE["acc"] = rt.buffer(1, "int32")
        STATE["reused"] = id(STATE["acc"]) in DEAD
    rt.launch(ADD, STATE["acc"], stream=stream)
rt = warmcli.runtime("host")
x = rt.upload(np.ones(1, np.int32))
rt.tune(Tunable("acc", KS, launch, repeats=3), x, 1)
print(json.dumps({"acc": int(rt.read(STATE["acc"])[0]), "reused": STATE["reused"]}))
"""


def _python(code: str, warm: Warm, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        env=warm.env,
        timeout=120,
        cwd=ROOT,
    )


def test_a_buffer_made_at_a_dead_kept_buffers_id_is_still_put_back(warm: Warm) -> None:
    """The tune guard kept buffers by id in a set, each removed by its weakref callback: a
    KeyboardInterrupt raised there was only printed ("Exception ignored in") and left the
    id, so an accumulator the app made at that id was not put back between candidate runs
    (9 where a cold run's pick makes 1). Kept buffers are now found by identity."""
    proc = _python(STALE_ID, warm)
    assert proc.returncode == 0, proc.stderr
    assert "Exception ignored" not in proc.stderr, proc.stderr
    got = json.loads(proc.stdout)
    assert got["reused"], got  # (CPython gave the accumulator a dead workspace's id)
    assert got["acc"] == 1, got
