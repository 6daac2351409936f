"""Stop 43's perf study of a kernel served hot (issue 16, `serve_per_kernel`): what stop 42
added to each served kernel's first launch, cut without dropping what it does.

The weak hit table (`warmcli.runtime.hits`, trial42d) made a closure for each kernel put into
it (a function and its cells, collected by the garbage collector: ~0.25 µs a served kernel);
its entries now share one module-level callback, and still leave with their kernel."""

from __future__ import annotations

import gc
import types
import weakref
from typing import Any

from warmcli.kernel import Kernel
from warmcli.runtime.hits import Hits, put_hit

SOURCE = "void touch(int *p, int n) { if (n < 0) p[0] = V; }"


def _kernels(n: int) -> list[Kernel]:
    return [Kernel(SOURCE, "touch", "Pi", defines={"V": i}) for i in range(n)]


def _functions() -> int:
    return sum(type(o) is types.FunctionType for o in gc.get_objects())


def test_putting_kernels_in_the_hit_table_makes_no_function_for_each() -> None:
    """200 kernels put into one table add no function object each (stop 42's added 200: a
    closure per kernel, its weak reference's callback); their callbacks are one."""
    kernels, hits = _kernels(200), {}
    collector: Any = object()
    gc.collect()
    before = _functions()
    for kernel in kernels:
        put_hit(hits, kernel, "f", collector)
    assert _functions() - before < 10
    assert len({id(entry[0].__callback__) for entry in hits.values()}) == 1
    assert all(hits[id(k)][0]() is k and hits[id(k)][1:] == ("f", collector) for k in kernels)


def test_an_entry_leaves_with_its_kernel_and_a_new_collector_keeps_its_reference() -> None:
    """A kernel's entry goes as the kernel goes (before its id is free for another object);
    put again under a new collector, it keeps its reference, and it still goes with it; an
    entry a later kernel of the same id put (its own) is not removed by the old one's."""
    hits: Hits = {}
    first, second = object(), object()
    kernel, other = _kernels(2)
    put_hit(hits, kernel, "f", first)  # type: ignore[arg-type]
    ref = hits[id(kernel)][0]
    callback = ref.__callback__  # (None once its kernel went)
    put_hit(hits, kernel, "g", second)  # type: ignore[arg-type]
    assert hits[id(kernel)] == (ref, "g", second)
    put_hit(hits, other, "h", first)  # type: ignore[arg-type]
    key = id(kernel)
    del kernel
    gc.collect()
    assert key not in hits and id(other) in hits
    # The old reference's callback, had it run late, leaves a newer entry under its key alone.
    newer = _kernels(1)[0]
    hits[key] = (weakref.ref(newer), "n", first)  # type: ignore[assignment]
    callback(ref)
    assert hits[key][1] == "n"
