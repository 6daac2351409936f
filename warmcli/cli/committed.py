"""The late interrupt of a command that puts one file in place (`warm merge`'s OUT, `warm
pull`'s PATH): once the change is committed, an interrupt is said as what was kept.

`kept_on_interrupt(target, work, show, interrupted)` runs `work(done)` inside
`warmcli.bundle.replacing.new_or_nothing(target)` (a new file not made leaves no lock file),
`work` appending what it committed to `done` the moment the file is in place; then `show`
says it. An interrupt before anything was committed goes on as any Ctrl-C (one line, exit
130); one once `done` holds it, however late (within `work`, as the file is let go, as
`show` prints), is `interrupted(done[0])`, which says the change was kept and exits. It owns
no state; it prints only through the callers' `show` and `interrupted`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

from warmcli.bundle.replacing import new_or_nothing

_Done = TypeVar("_Done")  # what `work` committed, as it appends it
_Result = TypeVar("_Result")  # what `work` returns, `show` says


def kept_on_interrupt(
    target: Path,
    work: Callable[[list[_Done]], _Result],
    show: Callable[[_Result, _Done], None],
    interrupted: Callable[[_Done], NoReturn],
) -> _Result:
    """`work(done)` then `show(its result, done[0])`, interrupts once `done` holds what it
    committed said by `interrupted(done[0])`; see the module doc."""
    done: list[_Done] = []
    stopped = False
    try:
        with new_or_nothing(target):
            try:
                result = work(done)
            except KeyboardInterrupt:  # a committed change's too (its `...Interrupted`): kept
                if not done:
                    raise
                stopped = True
        if stopped:
            interrupted(done[0])
        show(result, done[0])
    except KeyboardInterrupt:  # before it was said, however late: kept, said so
        if not done:
            raise
        interrupted(done[0])
    return result
