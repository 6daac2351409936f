"""A tune's served pick, launched: a pick the launch function refuses here is stale, measured again.

A tunable without `check=` keys no launch function (`warmcli.runtime.tune`: it keys as it did
before checks were), so a launch function edited since the bundle was warmed is served the pick
measured under the old one. Where the new one refuses that pick (it raises for it, as a guard
added for a candidate it no longer runs: `assert kernel.define("VEC") != "4"`), a cold start
excludes the pick with its reason and takes another; `launch_pick` tells the runtime so, and the
runtime measures the tune again (a miss, `launch` its reason: `stale_detail`), as a cold start
would, storing the new pick under the same key. A pick this process measured itself that its
launch function refuses (for inputs of the same key: `key=` or `bucket=` too coarse for its
guard) raises the launch function's error, noted (`_coarser`), as a cold start does: measured
again, inputs that alternate would measure the tune on every call. Only where nothing was
executed before the refusal by this thread (`Executed`: the buffers as they were, as the
measurement needs them; another thread's launch meanwhile is its own) and on a device that
executes (a pre-build's, `--arch`, keeps the error: a launch function that asks what only a GPU
answers raises there for every candidate); an error that is warm's own verdict (a discarded
read, a strict miss, a bundle or toolchain error) is raised as before. It owns no state (each
thread's count of launches executed, `Executed`, is a runtime's: `Runtime.executed`, which
counts them), counts nothing and never prints.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from warmcli.errors import BundleError, DiscardedReadError, StrictMissError, ToolchainError

if TYPE_CHECKING:
    from warmcli.backends.base import Stream
    from warmcli.records import TuneRecord
    from warmcli.runtime.tune import Tunable

_RAISED = (DiscardedReadError, StrictMissError, BundleError, ToolchainError)  # warm's verdicts


class Executed(threading.local):
    """The launches a runtime executed, `count`ed by the thread that launched them: a refusal
    is stale only where its own thread executed nothing before it (a shared count read
    another thread's launch meanwhile as this one's, and raised the refusal: by chance)."""

    count = 0


def launch_pick(
    rt: Any, tunable: Tunable, record: TuneRecord, inputs: tuple[Any, ...], stream: Stream
) -> str | None:
    """Launch `record`'s pick of `tunable` on `inputs` on the runtime `rt` (its launches
    executed counted, `executed`): None where it ran; where the launch function refused the
    bundle's pick, having executed nothing, why it is stale (the error, as one line)."""
    pick, before = record.pick or "", rt.executed.count
    try:
        tunable.launch(rt, tunable.candidates[pick], *inputs, stream=stream)
    except _RAISED:
        raise
    except Exception as exc:
        if rt.executed.count != before or not rt.device.can_execute:
            raise  # (its buffers may be written: no measurement could start from them)
        if rt.tunes.measured_here(record.key):
            exc.add_note(_coarser(tunable.name, pick))
            raise
        from warmcli.runtime.tune_guard import last_line  # (a stale pick's only)

        return stale_detail(pick, last_line(exc))
    return None


def _coarser(name: str, pick: str) -> str:
    """What a refusal of a pick measured in this process says beside the launch function's
    error: measured again, inputs that alternate measured it on every call (1.1 ms a call
    for two CPU candidates, not 0.03; a GPU tune's measurement on each)."""
    return (
        f"warm: tune {name}: the launch function refuses {pick!r}, the pick this process "
        "measured for other inputs of the same tune key: its key= or bucket= tells apart "
        "less than what the launch function refuses"
    )


def stale_detail(pick: str, error: str) -> str:
    """A stale pick's miss, said: what the launch function raised for it."""
    return (
        f"the launch function here refuses the bundle's pick {pick!r} ({error}), which a cold "
        "start excludes: measured again (a launch function edited since the pick was measured, "
        "as a tunable without check= keys none, or refusing inputs its tune key does not tell "
        "apart)"
    )
