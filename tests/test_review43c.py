"""Holes review43c found in hostile43's merge, each reproduced for real: the real CLI in a
subprocess, real thread pools, real SQLite files."""

from __future__ import annotations

import contextlib
import gc
import weakref
from concurrent.futures import ThreadPoolExecutor


class _Big:
    """Stands for a large array in a frame's locals (its liveness seen by a weak reference)."""


def test_noted_errors_of_a_pool_task_that_went_on_are_not_kept() -> None:
    """`pool_tasks._NOTED` kept every noted error (its traceback: each frame's locals) and its
    future (its result) until the pass ended: a task noting 2,000 errors, each raised where a
    large array lived, kept all 2,000 arrays alive. Now none is held once the task ended."""
    from warmcli.pool_tasks import ended_by_refused, note_refused

    ended_by_refused()  # a pass of its own
    alive: list[weakref.ref[_Big]] = []

    def deep(i: int) -> None:
        big = _Big()
        alive.append(weakref.ref(big))
        raise note_refused(RuntimeError(f"needs a GPU {i}"))

    def task() -> int:
        for i in range(2000):
            with contextlib.suppress(RuntimeError):  # caught: the task goes on
                deep(i)
        return 1

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(task) for _ in range(2)]  # kept, as a workload does
    gc.collect()
    assert sum(ref() is not None for ref in alive) == 0
    assert ended_by_refused() is None and [f.result() for f in futures] == [1, 1]


def test_a_pool_task_ended_by_its_noted_error_is_still_found_its_future_dropped() -> None:
    from warmcli.pool_tasks import ended_by_refused, note_refused

    ended_by_refused()

    def task(i: int) -> None:
        if i == 3:
            raise note_refused(RuntimeError("needs a GPU"))
        try:
            raise note_refused(RuntimeError("caught"))
        except RuntimeError:
            pass

    with ThreadPoolExecutor(2) as pool:
        for i in range(6):
            pool.submit(task, i)  # never read
    gc.collect()
    found = ended_by_refused()
    assert isinstance(found, RuntimeError) and str(found) == "needs a GPU"
    assert found.__traceback__ is not None  # where it rose: said in the run's error
    assert ended_by_refused() is None  # forgotten
