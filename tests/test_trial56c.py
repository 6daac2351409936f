"""Trial 56c: a production process's tries at warm, from the README, then an attacker's.

A process that ignores SIGCHLD (a daemon's idiom; an ignored signal stays ignored across exec, so
a service started by such a parent inherits it) has its children reaped by the kernel: Python
reads every child's exit status as 0. A host kernel that failed to compile in such a process was
taken for a C compiler that builds nothing (`ToolchainError: ... WARM_CC must name a C compiler`),
not the kernel's compile failure: a launch raised the wrong error, without cc's diagnostics, and a
tune with one candidate that does not compile failed whole, where every other process excludes
that candidate. Real parts: the real cc, a real production process.
"""

from __future__ import annotations

from conftest import Warm

IGNORING = """
import json, signal
import numpy as np
import warmcli
from warmcli import Kernel, Tunable
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
SRC = "void sc(float *x, int n) { for (int i = 0; i < n; i++) x[i] *= 2; TAIL }"
def launch(rt, k, x, n, *, stream=None):
    rt.launch(k, x, n, stream=stream)
rt = warmcli.runtime("host")
x = rt.upload(np.arange(4, dtype=np.float32))
"""
LAUNCH = (
    IGNORING
    + """
try:
    rt.launch(Kernel(SRC, "sc", "Pi", defines={"TAIL": "oops"}), x, 4)
except Exception as exc:
    print(json.dumps([type(exc).__name__, str(exc)]))
"""
)
TUNE = (
    IGNORING
    + """
T = Tunable("sc", {name: Kernel(SRC, "sc", "Pi", defines={"TAIL": tail})
                   for name, tail in (("ok", ""), ("broken", "oops"))}, launch)
rt.tune(T, x, 4)
print(json.dumps(rt.read(x).tolist()))
"""
)


def test_a_kernel_that_fails_to_compile_where_sigchld_is_ignored_is_its_compile_failure(
    warm: Warm,
) -> None:
    name, message = warm.production(LAUNCH)
    assert name == "KernelCompileError", message  # was ToolchainError
    assert "oops" in message and "WARM_CC must name" not in message


def test_a_tune_where_sigchld_is_ignored_excludes_the_candidate_that_fails_to_compile(
    warm: Warm,
) -> None:
    assert warm.production(TUNE) == [0.0, 2.0, 4.0, 6.0]  # was ToolchainError, the tune failed
