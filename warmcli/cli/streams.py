"""Keeping warm's own stdout and stderr for its output while a workload runs.

A workload prints as it likes (Python's `print`, its native code's `printf`), and may
close or replace `sys.stdout` or `sys.stderr`, or close or redirect descriptors 1 and 2.
`workload_output_on_stderr` puts back, after the block, the descriptors and the stream
objects warm had (a closed one reopened on its descriptor), so warm's report and errors
are still written where warm was told. Under `--json` it also points file
descriptor 1 at stderr while the workload is loaded and run, so what it writes lands on
stderr and stdout carries only the JSON object the command prints afterwards. It owns
the saved descriptors and stream objects for the block's length and nothing else; it
never prints.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import TextIO


@contextlib.contextmanager
def workload_output_on_stderr(active: bool) -> Iterator[None]:
    """In the block, what is written on stdout goes to stderr (when `active`); after it,
    descriptors 1 and 2 and `sys.stdout` and `sys.stderr` are warm's again."""
    streams = sys.stdout, sys.stderr
    sys.stdout.flush()
    saved = os.dup(1), os.dup(2)  # warm's own, whatever the workload closes or points elsewhere
    if active:
        os.dup2(2, 1)
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):  # what the workload left in Python's buffers
            with contextlib.suppress(ValueError, OSError, AttributeError):  # (one it closed,
                stream.flush()  # or set to None)
        for fd, copy in enumerate(saved, start=1):
            os.dup2(copy, fd)
            os.close(copy)
        _put_back(*streams)


def _put_back(stdout: TextIO, stderr: TextIO) -> None:
    """`sys.stdout` and `sys.stderr` as they were before the workload, reopened (on file
    descriptors 1 and 2, with their encoding and error handler) where it closed them."""
    sys.stdout, sys.stderr = _open(stdout, 1), _open(stderr, 2)


def _open(stream: TextIO, fd: int) -> TextIO:
    if not stream.closed:
        return stream
    return open(  # the process's stream from now on: never closed here
        fd,
        "w",
        encoding=stream.encoding,
        errors=stream.errors,
        closefd=False,
        buffering=1 if stream.line_buffering else -1,
    )
