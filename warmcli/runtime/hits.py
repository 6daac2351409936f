"""The hit path of a device's launches: a kernel object's id -> its loaded function, held weakly.

A launch of a kernel object its device already obtained finds the function by the object's id,
without the kernel cache's lock (`warmcli.runtime.kernel_cache`). The kernel is held by a weak
reference whose callback removes its entry as the object goes, before its memory (its id) is
freed, so an entry found is its live kernel's and the hit path need not dereference it: a script
re-run in one process (`%run`, `runpy.run_path`), or a notebook cell run again, makes new kernel
objects each time, and the old ones no longer live on here. The reference carries its key and
table, so every entry shares one callback (`_gone`): a served kernel's first launch makes no
function for it (a closure each cost ~0.25 µs, with the collections its objects caused). This
module owns no state (the table is the cache's plain dict); it never compiles, loads or counts.
"""

from __future__ import annotations

import weakref
from typing import Any

from warmcli.execution.statistics import StatisticsCollector
from warmcli.kernel import Kernel


class _Held(weakref.ref[Kernel]):
    """A weak reference to a kernel that knows its entry: its `key` in `hits`."""

    __slots__ = ("hits", "key")
    hits: Hits
    key: int


Hits = dict[int, tuple[_Held, Any, StatisticsCollector]]


def _gone(ref: _Held) -> None:
    """A kernel went: its entry removed, unless the key holds another's since (never: a
    reference's callback runs before its kernel's id is free; a cycle through the table, freed
    with the cache by gc)."""
    hits, key = ref.hits, ref.key
    entry = hits.get(key)
    if entry is not None and entry[0] is ref:
        del hits[key]


def put_hit(hits: Hits, kernel: Kernel, function: Any, collector: StatisticsCollector) -> None:
    """Keep `kernel`'s function (and the collector it was registered in) in `hits` until the
    kernel object goes."""
    key = id(kernel)
    old = hits.get(key)
    if old is not None:  # (its own: see above) its reference kept, its collector new
        hits[key] = (old[0], function, collector)
        return
    ref = _Held(kernel, _gone)
    ref.hits, ref.key = hits, key
    hits[key] = (ref, function, collector)
