"""A pre-build's check of one tune candidate: its launch function run once, discarded.

On a device that cannot execute (`--arch`), `measure` measures nothing: `check_candidate` runs
each candidate's launch function once on the tune's stream switched to `Discard`, checked as any
discarded launch is (its arguments against the letters, a CUDA launch's sizes), so one a GPU
would refuse is `failed` with its reason, the others `pending`. Two things keep that check a
GPU's while it runs (`checking()`, per thread). A sharded pass builds every kernel the launch
function launches beside the candidate, whichever shard owns its content hash, as a GPU's
measurement executes them: no other shard runs that tune's launch function, so nothing else
would build it. And a read back it makes (allowed by `--allow-discarded-reads`) answered with
zeros, not the data a GPU would give (`read_meaningless`), makes a refusal after it say nothing
of the GPU (a grid of 0 from a size read back): the candidate stays `pending`, for production
to measure, rather than the pre-build calling a good tune bad. This module never prints.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from warmcli.backends.base import Stream, StreamMode

_state = threading.local()  # depth: checks open in this thread; meaningless: a read answered


def checking() -> bool:
    """Whether this thread is running a candidate's discarded check."""
    return getattr(_state, "depth", 0) > 0


def read_meaningless(executes: bool) -> None:
    """A discarded read on a device that executes (`executes`) or not; one answered with
    zeros during a check makes that check's refusal no GPU's."""
    if not executes and checking():
        _state.meaningless = True


def check_candidate(run: Callable[[], None], stream: Stream) -> tuple[str, str]:
    """`run` (one candidate's launch function) once on `stream` switched to `Discard`: its
    status, `pending` or `failed`, and the reason of a failure."""
    from warmcli.execution.stream_mode import StreamModeOverride  # a pre-build's only
    from warmcli.runtime.tune_guard import last_line

    depth, outer = getattr(_state, "depth", 0), getattr(_state, "meaningless", False)
    _state.depth, _state.meaningless = depth + 1, False
    try:
        with StreamModeOverride(stream, StreamMode.DISCARD):
            run()
        return "pending", ""
    except Exception as exc:  # refused as production's GPU would refuse it, unless it read
        return ("pending", "") if _state.meaningless else ("failed", last_line(exc))
    finally:
        _state.depth, _state.meaningless = depth, outer or _state.meaningless
