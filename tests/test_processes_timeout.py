"""A child that runs past its timeout is killed and `processes.run` returns soon after,
even where a process it started left its group (`setsid`) and still holds the output
pipes: warm never waits on a process it cannot kill. Real processes."""

from __future__ import annotations

import subprocess
import time

from warmcli.backends import processes

MARK = "31.4159"  # the escaped daemon's sleep, found and ended after the test


def test_a_timeout_returns_though_an_escaped_grandchild_holds_the_pipes() -> None:
    started = time.monotonic()
    try:
        done = processes.run(["sh", "-c", f"setsid sleep {MARK} & sleep 30"], timeout=1.0)
        took = time.monotonic() - started
    finally:
        subprocess.run(["pkill", "-f", f"sleep {MARK}"], check=False)
    assert done.timed_out
    assert took < 1.0 + processes.DRAIN_SECONDS + 2.0, took
