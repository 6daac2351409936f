"""The forked servers' answers (`tests/forked_cli.py`, `tests/forked_python.py`) read as
they come: a server writes a child's pid, then its exit code, each a line; where both were
written before the test read the first (a command done at once, under load), `select` then
`readline` on the file object read both into its buffer and waited on the empty pipe for the
whole timeout (300 s), the kill going to a reaped pid and every later call out of step."""

from __future__ import annotations

import subprocess
import sys
import time

from forked_cli import read_line


def test_two_lines_written_at_once_are_both_read_without_waiting() -> None:
    writer = "import sys, time; sys.stdout.write('123\\n0\\n'); sys.stdout.flush(); time.sleep(60)"
    server = subprocess.Popen([sys.executable, "-c", writer], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        started = time.monotonic()
        assert read_line(server.stdout, 30) == 123
        assert read_line(server.stdout, 30) == 0
        assert time.monotonic() - started < 20, "the second line waited for the timeout"
        assert read_line(server.stdout, 0.2) is None  # nothing more: None once the time is up
    finally:
        server.kill()
        server.wait()
