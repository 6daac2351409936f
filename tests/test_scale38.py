"""Every command at a fleet's scale: no work that grows with kernels times misses.

A guard here bounds the work a real process does (bundle rows parsed into records, counted
in the process itself), never its time: a production process over a bundle of many builds
of one entry name (a kernel made many times with other defines) that misses some of them
parsed every build of that entry again on every miss, twice (once for another toolchain's
build to serve, once to explain the miss): quadratic in a fleet's kernels.
"""

from __future__ import annotations

from pathlib import Path

from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

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
from warmcli.bundle import core

parsed = [0]
parse = core._kernel_record


def counted(*args, **kwargs):
    parsed[0] += 1
    return parse(*args, **kwargs)


core._kernel_record = counted
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


TUNES = 200
TUNE_WORKLOAD = """
import os
from warmcli import Kernel, Tunable

DEVICE = "host"
SOURCE = "void step(int *p, int n) {{ if (n < 0) p[0] = T; }}"


def launch(rt, kernel, x, n, *, stream=None):
    rt.launch(kernel, x, n, stream=stream)


STEP = Tunable(
    "step",
    {{f"t{{t}}": Kernel(SOURCE, "step", "Pi", defines={{"T": t}}) for t in range(2)}},
    launch,
    key=lambda x, n: n,
    warmup=0,
    repeats=1,
)
SHAPES = list(range(1, {n} + 1))
if os.environ.get("EDIT") == "1":  # one in ten shapes new
    SHAPES += [10**6 + 7 * s for s in range({n} // 10)]


def workload(runtime):
    buffer = runtime.buffer(4, "int32")
    for shape in SHAPES:
        runtime.tune(STEP, buffer, shape)
    runtime.synchronize()
"""

# A production process that counts the tune rows it parses and the shape distances it
# computes to explain a miss (`shape_distance` where an older warm sorted by it).
COUNTING_TUNES = """
import json, logging, runpy, sys
import warmcli
from warmcli.bundle import core, tune_row
from warmcli.runtime import explain, nearest

counts = {"parsed": 0, "distances": 0}


def counted(module, name, what):
    original = getattr(module, name)

    def count(*args, **kwargs):
        counts[what] += 1
        return original(*args, **kwargs)

    setattr(module, name, count)


counted(core, "_tune_record", "parsed")
counted(tune_row, "_tune_record", "parsed")
counted(nearest, "_distance", "distances")
if hasattr(explain, "shape_distance"):
    counted(explain, "shape_distance", "distances")
lines = []
logging.getLogger("warmcli").addHandler(logging.Handler())
logging.getLogger("warmcli").handlers[0].emit = lambda r: lines.append(r.getMessage())
logging.getLogger("warmcli").setLevel(logging.INFO)
rt = warmcli.runtime("host")
runpy.run_path(sys.argv[1])["workload"](rt)
report = warmcli.report()
print(json.dumps({**counts, "tuned": len(report.tunes), "lines": lines}))
"""


def test_tune_misses_of_one_operation_read_and_rank_its_shapes_once(
    warm: Warm, tmp_path: Path
) -> None:
    workload, bundle = tmp_path / "w.py", tmp_path / "b.warm"
    workload.write_text(TUNE_WORKLOAD.format(n=TUNES))
    made = warm("run", workload, "--bundle", bundle, "-q")
    assert made.returncode == 0, made.stderr + made.stdout
    warm.env.update(EDIT="1", WARM_EXPLAIN="1")
    got = warm.production(COUNTING_TUNES, workload, bundle=bundle)
    misses = TUNES // 10
    assert got["tuned"] == misses
    # Every miss explained, the nearest shapes first, as ever.
    said = [line for line in got["lines"] if "miss: tune step" in line]
    assert len(said) == misses, got["lines"]
    assert said[0].endswith(
        "shape: bundle has 200 | 199 | 198 (+197 more), this process wants 1000000"
    ), said[0]
    # Served: each tune parsed once; the misses: the operation's tunes listed once (it was
    # once a miss: 20 * 200), its shapes ranked near the one wanted (it was every shape
    # at every miss: 20 * 200).
    assert got["parsed"] <= 2 * TUNES + 2 * misses, got
    assert got["distances"] <= TUNES + 20 * misses, got


def test_the_nearest_shapes_are_those_a_sort_gives() -> None:
    """Pure logic: what is said of the nearest shapes (by bisection among one-number
    shapes of a listing's bucket, or by a partial ranking) is what sorting every one by
    `shape_distance` says, ties and leading zeros included."""
    import random

    from warmcli.runtime.nearest import Listed, nearest_values, shape_distance

    rng = random.Random(380)

    def shape() -> str:
        n = rng.choice(["1", "2", "7", "64", "064", "0064", "100", "128", "99999999999999999"])
        return rng.choice([n, f"f32[{n}]", f"f32[{n}x{rng.randint(1, 9)}]", "none", ""])

    for _ in range(300):
        held = [{"device": "d", "checksum": "c", "shape": shape()} for _ in range(30)]
        listed = Listed(held)
        wanted = {"device": "d", "checksum": "c", "shape": shape()}
        differs, near = listed.nearest(wanted, ("device", "checksum", "shape"))
        if differs != ("shape",):
            continue
        ordered = sorted(near, key=lambda h: shape_distance(h["shape"], wanted["shape"]))
        shown = list(dict.fromkeys(h["shape"] or "none" for h in ordered))
        more = f" (+{len(shown) - 3} more)" if len(shown) > 3 else ""
        expected = " | ".join(shown[:3]) + more
        text = lambda h: h["shape"] or "none"  # noqa: E731
        assert nearest_values(near, wanted["shape"], listed, text, 3) == expected
        assert nearest_values(list(near), wanted["shape"], None, text, 3) == expected


# A production process that says what it compiled and why (the lines logged).
EXPLAINED = """
import json, logging, runpy, sys
import warmcli

lines = []
log = logging.getLogger("warmcli")
log.addHandler(logging.Handler())
log.handlers[0].emit = lambda r: lines.append(r.getMessage())
log.setLevel(logging.INFO)
rt = warmcli.runtime("host")
runpy.run_path(sys.argv[1])["workload"](rt)
print(json.dumps({"compiled": len(warmcli.report().kernels), "lines": lines}))
"""

UNSIGNED_WORKLOAD = """
import os
from warmcli import Kernel

DEVICE = "host"
SOURCE = "void touch(int *p, int n) {{ if (n < 0) p[0] = V; }}"
COUNT = int(os.environ.get("COUNT", "{n}"))
KERNELS = [Kernel(SOURCE, "touch", "Pi", defines={{"V": i}}) for i in range(COUNT)]


def workload(runtime):
    buffer = runtime.buffer(4, "int32")
    for kernel in KERNELS:
        runtime.launch(kernel, buffer, 1)
    runtime.synchronize()
"""


def test_another_toolchains_build_no_trusted_key_signed_is_still_named_unsigned(
    warm: Warm, tmp_path: Path
) -> None:
    """Served builds are read by key, and a build no trusted key signed is not served: the
    miss it makes is still explained as `unsigned` (the build found, not served), never as
    another one."""
    from tests.conftest import cc_binary

    workload, bundle = tmp_path / "w.py", tmp_path / "b.warm"
    workload.write_text(UNSIGNED_WORKLOAD.format(n=3))
    other = cc_binary(tmp_path / "other-cc", "other-cc (warm scale38) 1.0")
    warm.env.update(WARM_CC=str(other))
    assert warm("run", workload, "--bundle", bundle, "-q").returncode == 0
    assert warm("keygen", tmp_path / "k").returncode == 0
    assert warm("sign", bundle, "-k", tmp_path / "k").returncode == 0
    warm.env.update(COUNT="4")  # one more build, by the other compiler, signed by no one
    assert warm("run", workload, "--bundle", bundle, "-q").returncode == 0
    del warm.env["WARM_CC"]  # production builds with the system cc
    warm.env.update(WARM_TRUSTED_KEYS=str(tmp_path / "k.pub"), WARM_EXPLAIN="1")
    got = warm.production(EXPLAINED, workload, bundle=bundle)
    assert got["compiled"] == 1, got
    assert next(line for line in got["lines"] if "touch[V=3]" in line).startswith(
        "warm: miss: kernel touch[V=3]: unsigned"
    ), got
