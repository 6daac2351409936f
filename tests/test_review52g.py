"""Hostile review of stop 52's changes (tune_flight, keep_attributes, remote masking, signals).

Found:
- A forked child's tune waited for ever on a thread of its own: `tune_flight` named a key's
  measurer by its thread ident, and a child's new thread takes the ident of a parent's thread
  the child lacks (glibc hands the new thread that thread's stack), so a child forked while a
  thread measured a tune, that started threads of its own (a server's pool), waited on one of
  them, alive and measuring nothing, on its first call of that tune: for ever.
Real host runtime (the real C compiler), real fork.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np

from warmcli import Kernel, Runtime, Tunable
from warmcli.backends.host import HostDevice
from warmcli.execution import ProcessMode, ProcessModeOverride

SRC = "void add(float *x, int n) { for (int i = 0; i < n; i++) x[i] += STEP; }"


def _exit_code(pid: int, within: float) -> int | None:
    """The child's exit code, or None where it still runs after `within` seconds (then killed)."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def test_a_child_forked_while_a_thread_measures_a_tune_measures_it_itself() -> None:
    parent, measuring, release = os.getpid(), threading.Event(), threading.Event()

    def launch(rt, kernel, x, n, *, stream=None):
        if os.getpid() == parent and threading.current_thread().name == "measurer":
            measuring.set()
            release.wait(30)  # measuring as the main thread forks
        rt.launch(kernel, x, n, stream=stream)

    steps = {f"s{s}": Kernel(SRC, "add", "Pi", defines={"STEP": s}) for s in (1, 2)}
    tunable = Tunable("forked", steps, launch, warmup=1, repeats=1, restore=())
    rt = Runtime(HostDevice(), None, misses=None)
    try:
        with ProcessModeOverride(ProcessMode.EXECUTE):
            for kernel in steps.values():  # built before the fork
                rt.launch(kernel, rt.upload(np.zeros(4, np.float32)), 4)
            x = rt.upload(np.zeros(4, np.float32))
            measurer = threading.Thread(
                target=rt.tune, args=(tunable, x, 4), name="measurer", daemon=True
            )
            measurer.start()
            assert measuring.wait(30)
            pid = os.fork()
            if pid == 0:  # the child: threads of its own (a pool), then the tune
                code = 3
                try:
                    idle = threading.Event()
                    pool = [threading.Thread(target=idle.wait, daemon=True) for _ in range(8)]
                    for t in pool:
                        t.start()
                    reused = measurer.ident in {t.ident for t in pool}
                    pick = rt.tune(tunable, rt.upload(np.zeros(4, np.float32)), 4)
                    code = 0 if pick in steps and reused else 4 if pick in steps else 5
                finally:
                    os._exit(code)
            try:
                code = _exit_code(pid, 20)
            finally:
                release.set()
                measurer.join(30)
    finally:
        rt.close()
    assert code is not None, "the child's tune waited for ever on a thread measuring nothing"
    assert code == 0, code  # 4: no thread of the child's took the measurer's ident (unchecked)
