"""A new user's trial of the README's workload contract on the host backend, with workloads
a team has: kernels made in methods and dataclasses behind `functools.lru_cache`, sources
generated from a config file, asyncio and thread pools, OpenMP and `static` state, a struct
passed through a byte buffer. What differed from the README is pinned here: the real CLI
(forked), real SQLite bundles, the real C compiler, and production processes of their own
(forked from one that imported numpy and warmcli once, `tests/forked_cli.py`) whose
results are compared bit for bit with a cold process's.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import Kernel, Tunable

# A production process: the workload file served on the host runtime; prints the sha256 of
# every buffer it returned, read back, and how many kernels and tunes it had to make.
SERVE = """
import hashlib, json, runpy, sys
import warmcli
module = runpy.run_path(sys.argv[1])
rt = warmcli.runtime("host")
h = hashlib.sha256()
for b in module["workload"](rt):
    h.update(rt.read(b).tobytes())
r = warmcli.report()
print(json.dumps({"sha": h.hexdigest(), "kernels": len(r.kernels), "tunes": len(r.tunes)}))
"""


def _launch(rt, k, x, o, n, *, stream=None):  # type: ignore[no-untyped-def]
    rt.launch(k, x, o, n, stream=stream)


def _sum_tunable(name: str) -> Tunable:
    src = "void red(const float *x, float *o, int n) { for (int i = 0; i < n; i++) o[0] += x[i]; }"
    return Tunable(name, {f"u{u}": Kernel(src, "red", "PPi", defines={"U": u}) for u in (1, 2)},
                   _launch)  # fmt: skip


def test_a_tunable_hashes_as_its_equals_do() -> None:
    """A Tunable is frozen, but `hash()` of one raised `TypeError: unhashable type:
    'FixedCandidates'` (its candidates' mapping): no `functools.lru_cache` function nor set
    took one. Equal tunables hash alike; a `restore=` list of the user's is no obstacle."""
    a, b = _sum_tunable("sum"), _sum_tunable("sum")
    assert a == b and hash(a) == hash(b)
    assert len({a, b, _sum_tunable("other")}) == 2
    listed = Tunable("r", dict(a.candidates), _launch, restore=[1])
    assert hash(listed) == hash(Tunable("r", dict(a.candidates), _launch, restore=[1]))


LRU = """
import functools
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
SRC = ("void red(const float *x, float *o, int n) "
       "{ float s = 0; for (int i = 0; i < n; i += B) for (int j = i; j < i + B && j < n; j++) "
       "s += x[j]; o[0] = s; }")

class Ops:
    @functools.lru_cache(maxsize=None)
    def tunable(self, name):
        return Tunable(name, {f"b{b}": Kernel(SRC, "red", "PPi", defines={"B": b}) for b in (1, 4)},
                       self.run, check="b1", check_tolerance=(0, 0))
    def run(self, rt, k, x, o, n, *, stream=None):
        rt.launch(k, x, o, n, stream=stream)

OPS = Ops()

@functools.lru_cache(maxsize=None)
def plan(tunable, n):  # a team's plan cache, keyed by the tunable
    return (tunable, n)

def workload(rt):
    t, n = plan(OPS.tunable("red"), 64)
    x = rt.upload(np.arange(n, dtype=np.float32) / 3)
    o = rt.buffer(1)
    rt.tune(t, x, o, n)
    return [o]
"""


def test_a_tunable_behind_lru_cache_warms_and_serves_cold_bits(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """A workload keying an `lru_cache` by its Tunable failed its first pass with `TypeError:
    unhashable type: 'FixedCandidates'` (exit 2, nothing stored); it warms now, and a served
    process computes the cold one's bits, tuning nothing."""
    work = workload_file(LRU, "lru_work.py")
    bundle = tmp_path / "b.warm"
    proc = warm("run", work, "-b", bundle, "--quiet")
    assert proc.returncode == 0, proc.stderr
    cold = warm.with_env(WARM_BUNDLE="").production(SERVE, work)
    hot = warm.with_env(WARM_STRICT="1").production(SERVE, work, bundle=bundle)
    assert (cold["kernels"], cold["tunes"]) == (2, 1)
    assert hot == {"sha": cold["sha"], "kernels": 0, "tunes": 0}


STRUCT = """
import numpy as np
from warmcli import Kernel
DEVICE = "host"
APPLY = Kernel('''
#include <stdint.h>
typedef struct { double scale; int64_t offset; int32_t n; } params_t;
void apply(const params_t *p, double *x, int64_t *y) {
    for (int i = 0; i < p->n; i++) { x[i] *= p->scale; y[i] += p->offset; }
}''', "apply", "PPP")
MIX = Kernel('''
#include <stdint.h>
void mix(double *o, int64_t a, double b, int32_t c, uint64_t d, float e, int8_t f) {
    o[0] = (double)a + b; o[1] = c; o[2] = (double)d; o[3] = e; o[4] = f; o[5] = (double)(a * 3);
}''', "mix", "PqdiQfb")
PARAMS = np.dtype([("scale", "f8"), ("offset", "i8"), ("n", "i4")], align=True)

def workload(rt):
    p = np.zeros(1, PARAMS)
    p["scale"], p["offset"], p["n"] = 0.1, -(2**40), 5
    struct = rt.upload(p.view(np.uint8) if BYTES else p)
    x, y = rt.upload(np.arange(5.0)), rt.upload(np.arange(5, dtype=np.int64))
    rt.launch(APPLY, struct, x, y)
    o = rt.buffer(6, "float64")
    rt.launch(MIX, o, 2**53 + 1, 0.5, -7, 2**64 - 1, 1.25, -128)
    return [x, y, o]
"""


def test_a_struct_goes_as_the_bytes_of_an_aligned_record(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """No letter passes a C struct, and the README said nothing of how to; a record dtype's
    upload was refused saying only that it is not numeric. The refusal now says how (its
    bytes, a struct pointer, `align=True`), and so done the workload (with a double and
    int64 mix of scalars) warms and serves the cold process's bits."""
    refused = workload_file("BYTES = False\n" + STRUCT, "as_record.py")
    proc = warm("run", refused, "-b", tmp_path / "r.warm", "--quiet")
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert "\n" not in line and "Traceback" not in line, line
    assert "x.view(np.uint8)" in line and "pointer to the struct" in line, line
    assert "align=True" in line, line
    work = workload_file("BYTES = True\n" + STRUCT, "as_bytes.py")
    bundle = tmp_path / "b.warm"
    proc = warm("run", work, "-b", bundle, "--quiet")
    assert proc.returncode == 0, proc.stderr
    cold = warm.with_env(WARM_BUNDLE="").production(SERVE, work)
    hot = warm.with_env(WARM_STRICT="1").production(SERVE, work, bundle=bundle)
    assert cold["kernels"] == 2 and hot == {"sha": cold["sha"], "kernels": 0, "tunes": 0}


TASK_GROUP_READ = """
import asyncio
import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void inc3(int *x, int n) { for (int i = 0; i < n; i++) x[i] += 3; }", "inc3", "Pi")

def blocking(rt, j):
    x = rt.upload(np.arange(5 + j, dtype=np.int32))
    rt.launch(K, x, 5 + j)
    return int(rt.read(x).sum())

async def main(rt):
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(asyncio.to_thread(blocking, rt, j)) for j in range(2)]
    return [t.result() for t in tasks]

def workload(rt):
    print("sums", asyncio.run(main(rt)))
"""


def test_a_task_groups_read_back_is_named_not_called_caught(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """An asyncio workload whose TaskGroup's threads read back failed its first pass saying
    only `ExceptionGroup: unhandled errors in a TaskGroup`, after a note that the workload
    caught the refused read and went on (it did not). The line now names the refusal and
    `--allow-discarded-reads`, with no such note; with that option the workload warms."""
    work = workload_file(TASK_GROUP_READ, "group_read.py")
    proc = warm("run", work, "-b", tmp_path / "b.warm", "--quiet")
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("warm: ")]
    assert len(lines) == 1, proc.stderr
    assert "ExceptionGroup: unhandled errors in a TaskGroup" in lines[0], lines[0]
    assert "(holding DiscardedReadError: read of " in lines[0], lines[0]
    assert "--allow-discarded-reads" in lines[0] and "caught it" not in proc.stderr
    proc = warm("run", work, "-b", tmp_path / "b.warm", "--quiet", "--allow-discarded-reads")
    assert proc.returncode == 0, proc.stderr
    chained = TASK_GROUP_READ.replace(
        '    print("sums", asyncio.run(main(rt)))',
        "    try:\n        asyncio.run(main(rt))\n"
        "    except* RuntimeError as group:\n        raise ValueError('no sums') from group",
    )
    proc = warm("run", workload_file(chained, "chained.py"), "-b", tmp_path / "c.warm")
    assert proc.returncode == 2, proc.stderr
    assert "ValueError: no sums (raised from DiscardedReadError: read of " in proc.stderr


RANDOM_ALPHA = """
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
SRC = ("void ax(float *y, const float *x, float a, int n) "
       "{ for (int i = 0; i < n; i += S) for (int j = i; j < i+S &&j < n; j++) y[j] += a * x[j]; }")
def launch(rt, k, y, x, a, n, *, stream=None):
    rt.launch(k, y, x, a, n, stream=stream)
AX = Tunable("axpy", {f"s{s}": Kernel(SRC, "ax", "PPfi", defines={"S": s}) for s in (1, 8)},
             launch, KEY)
def workload(rt):
    rng = np.random.default_rng()  # unseeded: its data and its alpha differ every pass
    y = rt.upload(rng.standard_normal(64).astype(np.float32))
    x = rt.upload(rng.standard_normal(64).astype(np.float32))
    rt.tune(AX, y, x, float(rng.random()), 64)
"""


def test_a_random_scalar_input_miss_says_it_is_keyed_by_value(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """An unseeded workload passing a random `alpha` to a tune failed its verify pass
    (`shape: bundle has ... 0.61 64, this process wants ... 0.78 64`) with no word on why a
    value is in a "shape", nor what to do; it says so now, and `key=` warms it. Unseeded
    data alone never missed: a buffer's contents are in no key."""
    work = workload_file(RANDOM_ALPHA.replace("KEY", "None"), "alpha.py")
    proc = warm("run", work, "-b", tmp_path / "a.warm")
    assert proc.returncode == 1, proc.stderr
    assert "(it differs only in a float, an input keyed by its value" in proc.stdout + proc.stderr
    keyed = RANDOM_ALPHA.replace("KEY", "key=lambda y, x, a, n: n")
    proc = warm("run", workload_file(keyed, "keyed.py"), "-b", tmp_path / "k.warm", "--quiet")
    assert proc.returncode == 0, proc.stderr


MKDIR = """
import os
import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void mk(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "mk", "Pi")
def workload(rt):
    os.mkdir(OUT)  # a run's output folder: there already on the second run
    x = rt.upload(np.arange(4, dtype=np.float32))
    rt.launch(K, x, 4)
"""


def test_an_error_of_a_later_pass_says_the_workload_ran_before(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """A workload making its output folder failed with `FileExistsError` during
    CompileAndAutotune, with no word that warm had run it to its end once already in that
    process; the line now says so. A warm error of a later pass (a failed compile) is not
    told so: it is no leftover of the workload's."""
    out = tmp_path / "out"
    work = workload_file(MKDIR.replace("OUT", repr(str(out))), "mkdir_work.py")
    proc = warm("run", work, "-b", tmp_path / "b.warm")
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert "during CompileAndAutotune" in line and "FileExistsError" in line, line
    assert "(it ran to its end in this process before, during CompileOnly: " in line, line
    broken = MKDIR.replace("os.mkdir(OUT)", "pass").replace("x[i] += 1", "x[i] += MISSING")
    proc = warm("run", workload_file(broken, "broken.py"), "-b", tmp_path / "c.warm")
    assert proc.returncode == 2 and "failed to compile" in proc.stderr, proc.stderr
    assert "ran to its end" not in proc.stderr, proc.stderr


SET_OPTIONS = """
import numpy as np
from warmcli import Kernel
DEVICE = "host"
FLAGS = {"USE_A", "USE_B", "USE_C", "USE_D", "USE_E", "USE_F"}
K = Kernel("void sd(int *x) { x[0] = 1; }", "sd", "P", options=[f"-D{f}_ON" for f in FLAGS])
def workload(rt):
    rt.launch(K, rt.buffer(1, "int32"))
"""


def test_options_made_from_a_set_miss_saying_their_order_differs(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """Options listed from a set of strings come in another order in each process (its
    string hashes), so every production process missed what `warm run` stored, saying
    only that the options differ (the same ones, reordered). The miss now says they are
    the same in another order, and to sort them. Real processes: a fork shares its hash seed."""
    work = workload_file(SET_OPTIONS, "set_options.py")
    bundle = tmp_path / "b.warm"
    proc = Warm(dict(warm.env, PYTHONHASHSEED="1"))("run", work, "-b", bundle, "--quiet")
    assert proc.returncode == 0, proc.stderr
    proc = Warm(dict(warm.env, PYTHONHASHSEED="2"))("verify", bundle, "--workload", work)
    assert proc.returncode == 1, proc.stderr
    said = proc.stdout + proc.stderr
    assert "options: bundle has -DUSE_" in said, said
    assert "(the same options in another order: an order made from a set" in said, said
