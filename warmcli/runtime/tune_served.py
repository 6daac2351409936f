"""A tune's served pick, launched: a pick the launch function refuses here is stale, measured again.

A tunable without `check=` keys no launch function (`warmcli.runtime.tune`: it keys as it did
before checks were), so a launch function edited since the bundle was warmed is served the pick
measured under the old one. Where the new one refuses that pick (it raises for it, as a guard
added for a candidate it no longer runs: `assert kernel.define("VEC") != "4"`), a cold start
excludes the pick with its reason and takes another; `launch_pick` tells the runtime so, and the
runtime measures the tune again (a miss, `launch` its reason: `stale_detail`), as a cold start
would, storing the new pick under the same key (a pick this process measured alike: one its
launch function refuses for inputs of the same key, `key=` or `bucket=` too coarse for its
guard, is measured again there, not raised). Only where nothing was executed before the
refusal (`Runtime.executed` unchanged: the buffers as they were, as the measurement needs them)
and on a device that executes (a pre-build's, `--arch`, keeps the error: a launch function that
asks what only a GPU answers raises there for every candidate); an error that is warm's own
verdict (a discarded read, a strict miss, a bundle or toolchain error) is raised as before. It
owns no state, counts nothing and never prints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from warmcli.errors import BundleError, DiscardedReadError, StrictMissError, ToolchainError

if TYPE_CHECKING:
    from warmcli.backends.base import Stream
    from warmcli.runtime.tune import Tunable

_RAISED = (DiscardedReadError, StrictMissError, BundleError, ToolchainError)  # warm's verdicts


def launch_pick(
    rt: Any, tunable: Tunable, pick: str, inputs: tuple[Any, ...], stream: Stream
) -> str | None:
    """Launch the bundle's `pick` of `tunable` on `inputs` on the runtime `rt` (its launches
    executed counted, `executed`): None where it ran; where the launch function refused it,
    having executed nothing, why it is stale (the error, as one line)."""
    before = rt.executed
    try:
        tunable.launch(rt, tunable.candidates[pick], *inputs, stream=stream)
    except _RAISED:
        raise
    except Exception as exc:
        if rt.executed != before or not rt.device.can_execute:
            raise  # (its buffers may be written: no measurement could start from them)
        from warmcli.runtime.tune_guard import last_line  # (a stale pick's only)

        return stale_detail(pick, last_line(exc))
    return None


def stale_detail(pick: str, error: str) -> str:
    """A stale pick's miss, said: what the launch function raised for it."""
    return (
        f"the launch function here refuses the bundle's pick {pick!r} ({error}), which a cold "
        "start excludes: measured again (a launch function edited since the pick was measured, "
        "as a tunable without check= keys none, or refusing inputs its tune key does not tell "
        "apart)"
    )
