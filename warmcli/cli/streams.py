"""Keeping `--json`'s stdout for the one JSON object while a workload runs.

A workload prints as it likes (Python's `print`, its native code's `printf`). Under
`--json`, `workload_output_on_stderr` points file descriptor 1 at stderr while the
workload is loaded and run, so what it writes lands on stderr and stdout carries only
the JSON object the command prints afterwards. It owns the saved descriptor for the
block's length and nothing else; it never prints.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def workload_output_on_stderr(active: bool) -> Iterator[None]:
    """In the block, what is written on stdout goes to stderr (when `active`)."""
    if not active:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()  # what the workload left in Python's buffer, to stderr too
        os.dup2(saved, 1)
        os.close(saved)
