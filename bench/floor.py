"""The floor's process for `hot_vs_floor` (run as a module, as `bench.first_result` is).

`python -m bench.floor` imports numpy.random and nothing else; `python -m bench.floor
serving` also imports warm's serving names (`from warmcli import Kernel, Runtime,
Tunable, use_bundle`), what every hot process imports at least. Either prints its
first line's and its last line's clock (the machine's monotonic clock, which its parent
reads too). Launched as the hot child is (`-m`, a package's module from bytecode), the
floor pays the same interpreter start and the same launcher as the hot process (runpy,
this package's `__init__`), so the row's excess is what the hot process does beyond
it, not how it was started. It owns nothing and writes nothing.
"""

import time

STARTED = time.perf_counter()

import sys  # noqa: E402

import numpy.random  # noqa: E402, F401

if sys.argv[1:] == ["serving"]:
    from warmcli import Kernel, Runtime, Tunable, use_bundle  # noqa: F401

print(STARTED, time.perf_counter())
