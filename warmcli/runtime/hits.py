"""The hit path of a device's launches: a kernel object's id -> its loaded function, held weakly.

A launch of a kernel object its device already obtained finds the function by the object's id,
without the kernel cache's lock (`warmcli.runtime.kernel_cache`). The kernel is held by a weak
reference whose callback removes its entry as the object goes, before its memory (its id) is
freed: a script re-run in one process (`%run`, `runpy.run_path`), or a notebook cell run again,
makes new kernel objects each time, and the old ones no longer live on here. An entry found is
still dereferenced (`hit() is kernel`, ~20 ns): a callback interrupted as it starts (a Ctrl-C, a
signal handler that raises) leaves a gone kernel's entry, which a new kernel given that id must
never take for its own (it runs its own source; `put_hit` replaces the entry). The entry is
that reference itself (`Hit`), carrying its key, table, function and collector, so a served
kernel's first launch makes one object for it and every entry shares one callback (`_gone`):
a closure and a tuple each cost ~0.3 µs a served kernel, with the garbage collections those
objects caused. This module owns no state (the table is the cache's plain dict); it never
compiles, loads or counts.
"""

from __future__ import annotations

import weakref
from typing import Any

from warmcli.execution.statistics import StatisticsCollector
from warmcli.kernel import Kernel


class Hit(weakref.ref[Kernel]):
    """A kernel's entry: a weak reference to it, with its `function` and the `collector` it
    was registered in, and where it is kept (`key` in `hits`)."""

    __slots__ = ("collector", "function", "hits", "key")
    hits: Hits
    key: int
    function: Any
    collector: StatisticsCollector


Hits = dict[int, Hit]


def _gone(ref: Hit) -> None:
    """A kernel went: its entry removed, unless the key holds another's since (a callback
    runs before its kernel's id is free, but one interrupted left its entry, which a new
    kernel of that id replaced; a cycle through the table, freed with the cache by gc)."""
    hits, key = ref.hits, ref.key
    if hits.get(key) is ref:
        del hits[key]


def put_hit(hits: Hits, kernel: Kernel, function: Any, collector: StatisticsCollector) -> None:
    """Keep `kernel`'s function (and the collector it was registered in) in `hits` until the
    kernel object goes. An entry it has keeps its reference: its collector is the new one
    (its function, this device's loaded kernel, the same; a hit reads either, unlocked); a
    gone kernel's left there (its callback interrupted) is replaced. An object no weak
    reference can point at (a `weakref.proxy` of a kernel) is never kept: never a hit."""
    key = id(kernel)
    old = hits.get(key)
    if old is not None and old() is kernel:
        old.function, old.collector = function, collector
        return
    try:
        hit = Hit(kernel, _gone)
    except TypeError:  # no weak reference to it (a `weakref.proxy`): keyed at each launch
        return
    hit.hits, hit.key, hit.function, hit.collector = hits, key, function, collector
    hits[key] = hit
