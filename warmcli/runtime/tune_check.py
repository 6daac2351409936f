"""A pre-build's check of one tune candidate: its launch function run once, discarded.

On a device that cannot execute (`--arch`), `measure` measures nothing: `check_candidate` runs each
candidate's launch function once on the tune's stream switched to `Discard`, checked as any
discarded launch is (its arguments against the letters, a CUDA launch's sizes), so one a GPU would
refuse is `failed` with its reason, the others `pending` (every one `failed` where the tune's check
names a reference candidate that failed: `reference_failed`, nothing to compare, as on a GPU). Two
things keep that check a GPU's while it runs (`checking()`, per thread). A sharded pass builds
every kernel the launch function launches beside the candidate, whichever shard owns its content
hash (`for_every_shard()`), as a GPU's measurement executes them: no other shard runs that tune's
launch function, so nothing else would build it. And a read back it makes (allowed by
`--allow-discarded-reads`) answered with zeros, not the data a GPU would give (`read_meaningless`),
makes a refusal after it say nothing of the GPU (a grid of 0 from a size read back): the candidate
stays `pending`, for production to measure, rather than the pre-build calling a good tune bad, as
it does where the launch function asks the device what only a GPU answers (`unanswered`: its
`name`). A
tune the bundle holds pending, reached again by a pre-build, has its candidates checked again
(`check_pending`, once a process: `checked` names those checked already), their verdicts unused, so
what their launch functions launch is built where an earlier pre-build's did not launch it (a
launch function edited since: an unchecked tunable's key does not cover it), for every shard as at
the first check: the shard owning such a kernel never runs that tune's launch function, so a
build left to it is built by none (a `--dask` re-run's shard, sent no other shard's kernels,
builds such a kernel again: a compile, never a miss). A compile-only pass reaching it (a verify's:
its only pass) runs them once too, apart, so what they launch is queued, named missing where the
bundle lacks it. This module never prints.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from warmcli.backends.base import Stream, StreamMode

if TYPE_CHECKING:
    from warmcli.kernel import Kernel
    from warmcli.records import CandidateMeasurement, TuneRecord

_state = threading.local()  # depth: checks open in this thread; meaningless: a read answered
_checked: set[str] = set()  # the tunes (by key) whose candidates this process checked


def checking() -> bool:
    """Whether this thread is running a candidate's discarded check."""
    return getattr(_state, "depth", 0) > 0


def for_every_shard() -> bool:
    """Whether this thread's check builds what it launches whichever shard owns it: a
    tune's first check (`check_candidate`) and one checked again (`check_pending`)."""
    return getattr(_state, "shards", 0) > 0


def read_meaningless(executes: bool) -> None:
    """A discarded read on a device that executes (`executes`) or not; one answered with
    zeros during a check makes that check's refusal no GPU's."""
    if not executes and checking():
        _state.meaningless = True


def nothing_to_compare(reference: str) -> str:
    """Why a checked tune's candidate fails where its reference candidate failed (in the words
    of `tune_guard.OutputCheck.verdict` on a GPU)."""
    return f"check: the reference candidate {reference!r} failed: nothing to compare"


def reference_failed(check: object, found: Mapping[str, CandidateMeasurement]) -> str | None:
    """Where `check` names the reference candidate and `found` holds it failed (it is checked
    first), why every other candidate fails, as on a GPU: nothing to compare; else None."""
    reference = found.get(check) if isinstance(check, str) else None
    if reference is None or reference.status != "failed":
        return None
    return nothing_to_compare(reference.name)


def check_candidate(
    run: Callable[[], None], stream: Stream, refused: str | None = None, *, shards: bool = True
) -> tuple[str, str]:
    """`run` (one candidate's launch function) once on `stream` switched to `Discard`: its
    status, `pending` or `failed`, and the reason of a failure (`refused` where it fails
    whatever its launch does: its check's reference candidate failed, `reference_failed`)."""
    from warmcli.execution.stream_mode import StreamModeOverride  # a pre-build's only
    from warmcli.runtime.tune_guard import last_line

    depth, outer = getattr(_state, "depth", 0), getattr(_state, "meaningless", False)
    every = getattr(_state, "shards", 0)
    _state.depth, _state.meaningless, _state.shards = depth + 1, False, every + shards
    try:
        with StreamModeOverride(stream, StreamMode.DISCARD):
            run()
        return ("pending", "") if refused is None else ("failed", refused)
    except Exception as exc:  # refused as production's GPU would refuse it, unless it read
        if _state.meaningless or unanswered(exc):
            return ("pending", "") if refused is None else ("failed", refused)
        return "failed", last_line(exc)
    finally:
        _state.depth, _state.meaningless = depth, outer or _state.meaningless
        _state.shards = every


def unanswered(exc: BaseException) -> bool:
    """Whether `exc` is a question a device that cannot execute has no answer to (an
    attribute of a GPU's it lacks: `rt.device.name`), which production's GPU answers."""
    asked = getattr(exc, "obj", None) if isinstance(exc, AttributeError) else None
    return getattr(type(asked), "can_execute", True) is False


def checked(key: str) -> None:
    """The candidates of the tune under `key` were checked in this process."""
    _checked.add(key)


def check_pending(
    record: TuneRecord,
    candidates: Mapping[str, Kernel],
    run: Callable[[Kernel], None],
    stream: Stream,
    once: str = "",
) -> None:
    """A pending tune the bundle holds, reached again by a pre-build: each candidate not
    recorded failed checked again, its verdict unused (the record stands), so a kernel its
    launch function launches beside it is built where an earlier pre-build built none
    (whichever shard owns it: the shard owning it never runs this tune's launch function).
    A compile-only pass's (`once` "queued": a verify's, a pre-build's first) queues what it
    launches, once a process apart from the check that builds."""
    if once + record.key in _checked:  # once a process: a tune reached again, checked already
        return
    checked(once + record.key)
    failed = {c.name for c in record.candidates if c.status == "failed"}
    for name, kernel in candidates.items():
        if name not in failed:
            check_candidate(lambda kernel=kernel: run(kernel), stream)
