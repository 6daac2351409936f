"""The hit path of a device's launches: a kernel object's id -> its loaded function, held weakly.

A launch of a kernel object its device already obtained finds the function by the object's id,
without the kernel cache's lock (`warmcli.runtime.kernel_cache`). The kernel is held by a weak
reference whose callback removes its entry as the object goes, before its memory (its id) is
freed, so an entry found is its live kernel's and the hit path need not dereference it: a script
re-run in one process (`%run`, `runpy.run_path`), or a notebook cell run again, makes new kernel
objects each time, and the old ones no longer live on here. This module owns no state (the table
is the cache's plain dict); it never compiles, loads or counts.
"""

from __future__ import annotations

import weakref
from typing import Any

from warmcli.execution.statistics import StatisticsCollector
from warmcli.kernel import Kernel

Hits = dict[int, tuple["weakref.ref[Kernel]", Any, StatisticsCollector]]


def put_hit(hits: Hits, kernel: Kernel, function: Any, collector: StatisticsCollector) -> None:
    """Keep `kernel`'s function (and the collector it was registered in) in `hits` until the
    kernel object goes."""
    key = id(kernel)
    old = hits.get(key)
    if old is not None:  # (its own: see above) its reference kept, its collector new
        hits[key] = (old[0], function, collector)
        return

    def gone(ref: weakref.ref[Kernel]) -> None:
        entry = hits.get(key)  # (a cycle through `hits`: freed with the cache, by gc)
        if entry is not None and entry[0] is ref:
            del hits[key]

    hits[key] = (weakref.ref(kernel, gone), function, collector)
