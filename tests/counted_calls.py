"""The calls a piece of code makes, counted by name: for a test of how much work something does
(passes over a text, parses, reads), counted rather than timed (a speed target belongs in
`bench/`, and a clock on a loaded CI flakes).

`counted()` is a context manager that sets `sys.setprofile` on the calling thread for its body
and counts each call by name: a Python function's by its code's qualified name
(`changed_headers`, `Listed.said`), a builtin's by its own (`str.replace`, `Pattern.sub`,
`loads`). It owns the `Counter` it hands back (filled as the body runs) and the thread's profile
function while it is open (the one before is put back); it never counts other threads' calls.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any


@contextmanager
def counted() -> Iterator[Counter[str]]:
    """Count the calls the body makes on this thread, by name (see the module doc)."""
    calls: Counter[str] = Counter()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            calls[frame.f_code.co_qualname] += 1
        elif event == "c_call":
            calls[getattr(arg, "__qualname__", repr(arg))] += 1

    before = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(before)
