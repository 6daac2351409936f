"""Every command at a fleet's scale: no work that grows with kernels times misses.

A guard here bounds the work a real process does (bundle rows parsed into records, counted
in the process itself), never its time: a production process over a bundle of many builds
of one entry name (a kernel made many times with other defines) that misses some of them
parsed every build of that entry again on every miss, twice (once for another toolchain's
build to serve, once to explain the miss): quadratic in a fleet's kernels.
"""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Warm

KERNELS = 300
MISSES = 30  # one in ten kernels edited

WORKLOAD = """
import os
from warmcli import Kernel

DEVICE = "host"
EDIT = os.environ.get("EDIT") == "1"
SOURCE = "void touch(int *p, int n) {{ if (n < 0) p[0] = V; }}"
KERNELS = [
    Kernel(SOURCE, "touch", "Pi", defines={{"V": i + (10**7 if EDIT and i % 10 == 3 else 0)}})
    for i in range({n})
]


def workload(runtime):
    buffer = runtime.buffer(4, "int32")
    for kernel in KERNELS:
        runtime.launch(kernel, buffer, 1)
    runtime.synchronize()
"""

# A production process that counts the kernel rows it parses into records (the one parser
# of a kernel row, wherever the bundle is read: a served kernel, a listing of one entry's).
COUNTING = """
import json, logging, runpy, sys
import warmcli
from warmcli.bundle import store

parsed = [0]
parse = store._kernel_record


def counted(*args, **kwargs):
    parsed[0] += 1
    return parse(*args, **kwargs)


store._kernel_record = counted
logging.basicConfig(level=logging.INFO, format="%(message)s")
rt = warmcli.runtime("host")
runpy.run_path(sys.argv[1])["workload"](rt)
report = warmcli.report()
print(json.dumps({"parsed": parsed[0], "compiled": len(report.kernels)}))
"""


def test_misses_of_one_entry_read_its_builds_once_not_once_a_miss(
    warm: Warm, tmp_path: Path
) -> None:
    workload, bundle = tmp_path / "w.py", tmp_path / "b.warm"
    workload.write_text(WORKLOAD.format(n=KERNELS))
    made = warm("run", workload, "--bundle", bundle, "-q")
    assert made.returncode == 0, made.stderr + made.stdout
    warm.env.update(EDIT="1", WARM_EXPLAIN="1")
    got = warm.production(COUNTING, workload, bundle=bundle)
    assert got["compiled"] == MISSES
    # Served: each kept build parsed once; the misses: one entry's builds a few times in
    # all (it was twice a miss: 2 * 30 * 300 = 18,000).
    assert got["parsed"] <= 4 * KERNELS, got


def test_a_listings_index_finds_what_the_scan_finds() -> None:
    """Pure logic: `Listed.nearest` (by its index) answers as `nearest` (the scan) does,
    whatever differs (none, one component, several) and whatever the values (text, none,
    a bundle's odd non-text one)."""
    import random

    from warmcli.runtime.nearest import Listed, nearest

    order = ("a", "b", "c", "d")
    rng = random.Random(38)
    odd: list[object] = ["x", "y", None, ["x"]]
    for trial in range(300):
        values: list[object] = ["x", "y", "z", None] if trial % 3 else odd
        held = [{c: rng.choice(values) for c in order if rng.random() > 0.1} for _ in range(12)]
        listed = Listed(held)
        for _ in range(5):
            wanted = {c: rng.choice(["x", "y", "z", "w"]) for c in order}
            assert listed.nearest(wanted, order) == nearest(wanted, held, order), (held, wanted)
