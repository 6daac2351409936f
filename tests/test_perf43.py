"""Stop 43's perf study of a kernel served hot (issue 16, `serve_per_kernel`): what stop 42
added to each served kernel's first launch, cut without dropping what it does.

The weak hit table (`warmcli.runtime.hits`, trial42d) made a closure for each kernel put into
it, and a weak reference and a tuple (objects the garbage collector tracks: ~0.3 µs a served
kernel, and the collections they caused); an entry is now one weak reference carrying what
the tuple held, all sharing one module-level callback, and it still leaves with its kernel."""

from __future__ import annotations

import gc
import types
from typing import Any

from warmcli.kernel import Kernel
from warmcli.runtime.hits import Hits, put_hit

SOURCE = "void touch(int *p, int n) { if (n < 0) p[0] = V; }"


def _kernels(n: int) -> list[Kernel]:
    return [Kernel(SOURCE, "touch", "Pi", defines={"V": i}) for i in range(n)]


def _functions() -> int:
    return sum(type(o) is types.FunctionType for o in gc.get_objects())


def test_putting_kernels_in_the_hit_table_makes_one_object_and_no_function_for_each() -> None:
    """200 kernels put into one table add no function object each (stop 42's added 200: a
    closure per kernel, its weak reference's callback) and one object the garbage collector
    tracks each (stop 42's five: the closure, its cell, the reference, the entry's tuple);
    their callbacks are one."""
    kernels, hits = _kernels(200), {}
    collector: Any = object()
    gc.collect()
    before, tracked = _functions(), len(gc.get_objects())
    for kernel in kernels:
        put_hit(hits, kernel, "f", collector)
    assert _functions() - before < 10
    assert len(gc.get_objects()) - tracked < 1.1 * len(kernels)
    assert len({id(hit.__callback__) for hit in hits.values()}) == 1
    assert all(
        (hit := hits[id(k)])() is k and (hit.function, hit.collector) == ("f", collector)
        for k in kernels
    )


def test_an_entry_leaves_with_its_kernel_and_a_new_collector_keeps_its_reference() -> None:
    """A kernel's entry goes as the kernel goes (before its id is free for another object);
    put again under a new collector, it keeps its reference, and it still goes with it; an
    entry a later kernel of the same id put (its own) is not removed by the old one's."""
    hits: Hits = {}
    first, second = object(), object()
    kernel, other = _kernels(2)
    put_hit(hits, kernel, "f", first)  # type: ignore[arg-type]
    hit = hits[id(kernel)]
    callback = hit.__callback__  # (None once its kernel went)
    put_hit(hits, kernel, "g", second)  # type: ignore[arg-type]
    assert hits[id(kernel)] is hit and (hit.function, hit.collector) == ("g", second)
    put_hit(hits, other, "h", first)  # type: ignore[arg-type]
    key = id(kernel)
    del kernel
    gc.collect()
    assert key not in hits and id(other) in hits
    # The old reference's callback, had it run late, leaves a newer entry under its key alone.
    newer = _kernels(1)[0]
    put_hit(hits, newer, "n", first)  # type: ignore[arg-type]
    hits[key] = hits.pop(id(newer))  # (as if it had the old one's id)
    callback(hit)
    assert hits[key].function == "n"
