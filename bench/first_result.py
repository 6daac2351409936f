"""One start of a workload in a fresh process, to its first result (run as a module).

`python -m bench.first_result WORKLOAD [BUNDLE]` (a module, so its code comes from
bytecode as a production process's own modules do: run as a script it would be compiled
afresh in every process, ~1.6 ms the floor does not carry) imports what a production
process imports (warm, and numpy with `numpy.random`, which the example uses), loads the
bundle (if given) with `use_bundle`, takes the production runtime for the workload's
`DEVICE` (the host where it names none) and runs the workload once under `Execute` (its
first result), then once more on the same runtime (everything already loaded: what is
left is the workload's own compute and dispatch). The workload file is imported as a
production process imports its own code (by `importlib`, its folder first on
`sys.path`), not through warm's workload loader, which only `warm run` needs. It prints
one JSON object of seconds (`imports`, `first`, `opened`: the part of `first` before the
workload starts, the bundle opened and the runtime made, `again`, and `workload`:
importing the workload file; `collected` and `collected_again`: what Python's cyclic
garbage collector took in the first run's launches and in the second run, timed by a
`gc.callbacks` hook installed before the bundle is opened, never disabling or freezing the
collector: a user's process pays its collections, and where one lands moves with every
object allocated since the last) and counts (`collections`: the generation of each
collection in the first run's launches), with `started` and `ended` (this module's first
line and the JSON's making, on the machine's monotonic clock, which its parent reads
too), then one line more when every other exit handler has run (warm's own: the bundle
closed): that clock again; its parent times the whole process, so start and exit are
measured apart. It never writes the bundle.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import atexit  # noqa: E402
import gc  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import numpy.random  # noqa: E402, F401  (the example's first use would import it)

# Registered before warm's own handler, so it runs after it: the last thing before exit.
atexit.register(lambda: sys.stdout.write(f"{time.perf_counter()!r}\n"))

from warmcli import production  # noqa: E402
from warmcli.execution.process_mode import default_collector  # noqa: E402


def load_workload(path: str) -> tuple[Callable[[Any], Any], str]:
    """The workload file's `workload(runtime)`, imported as its own module, and its
    `DEVICE` (`host` where it names none)."""
    resolved = os.path.realpath(path)  # os.path, not pathlib: a production process imports none
    spec = importlib.util.spec_from_file_location("workload", resolved)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(resolved))  # it imports the modules beside it
    spec.loader.exec_module(module)
    return module.workload, getattr(module, "DEVICE", "host")


# Each collection's start, its seconds and generation, once `main` hooks them: floats and
# small ints appended to lists, no object the collector tracks (the interpreter hands the
# hook a dict of its own per collection, freed with it).
_AT: list[float] = []
_SPENT: list[float] = []
_GENERATION: list[int] = []


def _collecting(phase: str, info: dict[str, int]) -> None:
    """`gc.callbacks`' hook: times each collection, whatever its generation."""
    if phase == "start":
        _AT.append(time.perf_counter())
    else:
        _SPENT.append(time.perf_counter() - _AT[-1])
        _GENERATION.append(info["generation"])


def _collected(since: float, until: float) -> tuple[float, list[int]]:
    """Seconds in the collections that started between `since` and `until`, and their
    generations."""
    inside = [i for i, at in enumerate(_AT[: len(_SPENT)]) if since <= at < until]
    return sum(_SPENT[i] for i in inside), [_GENERATION[i] for i in inside]


def main(workload_path: str, bundle_path: str | None) -> dict[str, object]:
    imported = time.perf_counter()
    workload, device = load_workload(workload_path)
    gc.callbacks.append(_collecting)
    begin = time.perf_counter()
    if bundle_path:
        production.use_bundle(bundle_path)
    rt = production.runtime(device)
    opened = time.perf_counter()  # the bundle open and the runtime made: serving starts
    workload(rt)
    rt.synchronize()
    first = time.perf_counter()
    workload(rt)
    rt.synchronize()
    again = time.perf_counter()
    gc.callbacks.remove(_collecting)
    collected, generations = _collected(opened, first)
    stats = default_collector().reader().total()
    return {
        "imports": imported - STARTED,
        "first": first - begin,
        "opened": opened - begin,
        "again": again - first,
        "workload": begin - imported,
        "collected": collected,
        "collected_again": _collected(first, again)[0],
        "collections": generations,
        "compiled": stats.compilation.compiled,
        "loaded": stats.compilation.loaded,
        "measured": stats.autotune.measured,
        "hits": stats.autotune.hits,
        "started": STARTED,
        "ended": time.perf_counter(),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)))
