"""What warm refuses in a task of a `concurrent.futures` thread pool (a GPU-less pre-build's want
of a GPU), which no thread hook sees: the pool keeps what a task raised in the task's future,
which the workload may never read. `note_refused(exc)`, called where warm makes such an error,
notes it with the future of the pool task it is made in (found on this thread's stack: the
pool's `_WorkItem.run` frame; none outside a pool task); `ended_by_refused()`, at a pass's end,
says what the first task that ended with one raised (that very error, or one raised from it or
while handling it, or a group holding it, as `found_in` walks a chain: a task that caught it and
went on is no failure), and forgets every note; the error is marked too, so that a process
pool's task (in a child a pass forked) that ends by it hands it to the parent marked
(`warmcli.errors.arrived_refused`), where it is pickled as the task's failure
(`sending_a_failure`: one that returned it, having caught it, went on), or carried by the
error the task raised from it or while handling it (`carry_in_failure`: a chain is never
pickled, so the refusal would not cross; the parent's error keeps it as `_warm_refused`). A note
holds neither the error nor the future: the error is marked with its task's `_Note` (held only
where it takes no attribute, until its task ends), the future judged by a callback as it ends,
and only the first task ended by its note kept: a task that notes 10,000 errors and goes on,
each traceback's locals holding a large array, keeps none of them alive (the notes kept them all
until the pass ended). Nothing is patched: Python's pool runs as ever (the process pool's
wrapping of a failure shows each error of its chain: a marked one's `str` is where it is carried,
`warmcli.errors.WarmError`). Its only state is that first task's error and the pass's number (a
lock guards them); it never prints."""

from __future__ import annotations

import contextlib
import functools
import itertools
import sys
import threading
import weakref
from collections.abc import Callable, Container
from concurrent.futures import Future
from typing import Any, TypeVar

E = TypeVar("E", bound=BaseException)

_LOCK = threading.Lock()
_FIRST: list[tuple[int, BaseException]] = []  # the first task ended by its note: order, raised
_NOTES: weakref.WeakKeyDictionary[Future[Any], _Note] = weakref.WeakKeyDictionary()
_ORDER = itertools.count()
_PASS = [0]  # bumped by each `ended_by_refused`: a task ending later belongs to no pass


class _Note:
    """A pool task's note: the pass it was made in, its order, and the noted errors that
    take no attribute (held until the task ends; the others are marked with the note)."""

    __slots__ = ("held", "order", "pass_number")

    def __init__(self, pass_number: int, order: int) -> None:
        self.pass_number, self.order, self.held = pass_number, order, []

    def __reduce__(self) -> tuple[type[_Note], tuple[int, int]]:  # (an error sent pickled)
        return _Note, (-1, -1)


def note_refused(exc: E) -> E:
    """`exc`, noted where this thread runs a thread pool's task, and marked (`refused_by_pass`:
    where a process pool's task ends by it, its parent keeps it as it arrives, `warmcli.errors`)."""
    with contextlib.suppress(Exception):  # (an exception class that takes no attributes)
        exc.refused_by_pass = True  # type: ignore[attr-defined]
    frame = _running({_code("concurrent.futures.thread", "_WorkItem.run")})
    future = getattr(frame.f_locals.get("self"), "future", None) if frame is not None else None
    del frame
    if isinstance(future, Future):
        with _LOCK:
            note = _NOTES.get(future)
            if note is None:
                note = _NOTES[future] = _Note(_PASS[0], next(_ORDER))
                future.add_done_callback(functools.partial(_ended, note))
            elif note.pass_number != _PASS[0]:  # a task going on into a later pass: of it now
                note.pass_number, note.order = _PASS[0], next(_ORDER)
        try:
            exc._warm_noted_in = note  # type: ignore[attr-defined]
        except Exception:
            note.held.append(exc)
    return exc


def _ended(note: _Note, future: Future[Any]) -> None:
    """A noted task's end: kept where it is its pass's first to end by what it noted."""
    held, note.held = note.held, []
    raised = None if future.cancelled() else future.exception()

    def noted(exc: BaseException) -> bool:
        return getattr(exc, "_warm_noted_in", None) is note or any(exc is h for h in held)

    try:
        if raised is None or found_in(raised, noted) is None:
            return
    except Exception:  # (an error's own __getattr__ failing: never the pool's log)
        return
    with _LOCK:
        if note.pass_number == _PASS[0] and (not _FIRST or note.order < _FIRST[0][0]):
            _FIRST[:] = [(note.order, raised)]


# Where a process pool's worker sends a task's outcome to its parent, and what says it failed.
_SENDS = (
    ("concurrent.futures.process", "_sendback_result", lambda f: f.get("exception") is not None),
    ("multiprocessing.pool", "worker", lambda f: f.get("result", (True,))[0] is False),
)


def sending_a_failure() -> bool:
    """Whether this thread, a process pool's worker, pickles a task's failure for its parent now
    (its sending frame on this stack: one that raised, not one that returned what it caught)."""
    sends = {_code(module, name): failed for module, name, failed in _SENDS}
    frame = _running(sends)
    return frame is not None and bool(sends[frame.f_code](frame.f_locals))


# Where a process pool's worker wraps what a task raised (`e`, local to that frame) before it
# sends it: its traceback made text, which shows (`str`) each error of its chain.
_WRAPS = (("concurrent.futures.process", "_process_worker"), ("multiprocessing.pool", "worker"))


def carry_in_failure(exc: BaseException) -> None:
    """Where this thread, a process pool's worker, wraps a task's failure that holds `exc` in its
    chain (raised from it or while handling it) but is not `exc`, `exc` is set on that failure
    (`_warm_refused`): only the failure is pickled for the parent, without its chain."""
    frame = _running({_code(module, name) for module, name in _WRAPS})
    raised = frame.f_locals.get("e") if frame is not None else None
    del frame
    if isinstance(raised, BaseException) and raised is not exc:
        with contextlib.suppress(Exception):  # (a failure that takes no attributes: as before)
            if found_in(raised, lambda each: each is exc) is not None:
                raised.__dict__.setdefault("_warm_refused", exc)


def _code(module: str, name: str) -> Any:
    """The code of `name` (a function, or `Class.method`) in `module`, where it is loaded."""
    found: Any = sys.modules.get(module)
    for part in name.split("."):
        found = getattr(found, part, None)
    return getattr(found, "__code__", None)


def _running(codes: Container[Any]) -> Any:
    """The nearest frame on this thread's stack, above its caller's, that runs one of `codes`
    (a pool's own function: Python's pools are read, never patched); None where none does."""
    frame: Any = sys._getframe(2)
    while frame is not None and frame.f_code not in codes:
        frame = frame.f_back
    return frame


def ended_by_refused() -> BaseException | None:
    """What the first noted task that ended by its noted error raised; every note forgotten."""
    with _LOCK:
        first = _FIRST[0][1] if _FIRST else None
        _FIRST.clear()
        _PASS[0] += 1
    return first


def found_in(
    exc: BaseException | None, match: Callable[[BaseException], bool]
) -> BaseException | None:
    """The first exception that `match`es in `exc`'s chain (itself, what it was raised from
    or while handling, and a group's members, each of theirs too), or None: 1,024 looked at
    at most (a chain may loop, a group may be huge)."""
    todo, seen = [exc], set()
    while todo and len(seen) < 1024:
        if (each := todo.pop()) is not None and id(each) not in seen:
            if match(each):
                return each
            seen.add(id(each))
            held = each.exceptions if isinstance(each, BaseExceptionGroup) else ()
            todo += [*reversed(held), each.__context__, each.__cause__]
    return None
