"""A new user's own workloads (round 32): what a first-time user's programs meet.

Written from the README alone, through the real CLI in processes of their own and real cc on
the host backend (`warm` commands and production processes forked from ones that imported
warm once, `tests/forked_cli.py`, `tests/forked_python.py`, but where a flag or a fresh
start is the point): workloads of many dtypes (float16, float64, complex64, uint64, bool),
zero-size, one-element, Fortran-order and strided inputs, big and non-finite scalars, kernels
built in loops with f-strings and defines of every kind, tunables of many candidates with
options, generator and async workloads, `-m pkg.module` workloads with threads on their own
streams, workloads reading files beside them. For each, a cold start (no bundle), a miss
(a bundle warmed from part of it) and a hit (its own bundle, served strict) give the same
bytes, and the hit compiles and tunes nothing.

Bugs it found:
- an exception whose `__str__` itself raises (an app error class that looks its message
  up, `MESSAGES[self.code]`) broke warm's own formatting: raised by a workload, or at its
  import, `warm run` died with warm's traceback and exit 1; raised by a tune candidate's
  launch function, the candidate was not excluded, the whole run failed with the
  `__str__`'s `KeyError` instead. Such an exception now reads as Python shows it,
  `<exception str() failed>`, and is handled as any other;
- a finite `np.longdouble` past an `f` or `d` letter's range was passed as inf (a float64
  past `f`'s is refused);
- `warm run -m pkg` took `pkg/__init__.py` where `python -m pkg` runs `pkg/__main__.py`;
- a checked tunable whose check or launch function has a docstring was never served to a
  process under `python -OO` (which strips docstrings, shifting the bytecode's constant
  indices): the code is now keyed by what its instructions do;
- a workload file mapping a function of its own over a `spawn` pool hung `warm run` (the
  workers could not import warm's private module name, died, and were restarted forever):
  the module is now known by its file's name too where that is free, its functions named
  as of it;
- `warm run -m .main` was reported at `<frozen importlib.util>:32:`: a relative module name
  is now refused naming it, as `python -m` refuses it;
- a C kernel whose options hold it to its standard (`-std=c99 -pedantic-errors`, `-ansi
  -Wpedantic -Werror`), which cc builds alone, failed under warm with 'parameter letters
  do not match': warm's own signature probe used C11's `_Static_assert` and `_Generic`
  (and mixed declarations and code): it is now marked `__extension__`, asserts first;
  likewise a kernel declared `nonnull` built with `-Wall -Werror` failed on the probe's
  call with null pointers: it calls the entry with its own parameters now;
- a cold process compiling from several threads failed now and then (about 1 run in 10
  under load) with `RuntimeError: release unlocked lock` in the compile pool's `submit`:
  Python's thread pool module, first imported by one thread's compile while another
  thread's compiler fork waited in warm's at-fork hook for that import, had its at-fork
  release run without its take. It is imported with the module that forks compilers now;
- a `restore=` callable returning None, or one buffer bare, failed with Python's
  `'NoneType' object is not iterable`, naming no tunable.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Warm
from forked_python import ForkedPythons


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


_python = ForkedPythons(ROOT)  # production processes' servers, one an environment apart from WARM_*


@pytest.fixture(scope="module", autouse=True)
def _pythons() -> Iterator[None]:
    """The forking servers of the production processes whose results are tested (each a fork
    of a process that imported numpy and warmcli, `tests/forked_python.py`), ended with the
    module. `python -OO`'s and the fork-hook probe's start as processes of their own."""
    yield
    _python.close()


# An application error whose message is looked up, and the lookup fails (its `__str__` raises).
APP_ERROR = """
class AppError(Exception):
    def __str__(self):
        return {}[self.args[0]]
"""


def _one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warm: error:"), done.stderr
    for needle in needles:
        assert needle in lines[0], done.stderr


def test_a_workload_raising_an_error_whose_str_raises_is_one_line(
    warm: Warm, tmp_path: Path
) -> None:
    workload = tmp_path / "w.py"
    workload.write_text(APP_ERROR + "def workload(rt):\n    raise AppError(7)\n")
    _one_line_error(warm("run", workload, "-b", tmp_path / "b.warm", "-q"), "w.py:6", "AppError")


def test_a_workload_raising_such_an_error_at_import_is_one_line(warm: Warm, tmp_path: Path) -> None:
    workload = tmp_path / "w.py"
    workload.write_text(APP_ERROR + "raise AppError(7)\ndef workload(rt):\n    pass\n")
    _one_line_error(warm("run", workload, "-b", tmp_path / "b.warm", "-q"), "w.py:5", "AppError")


def test_a_candidate_raising_an_error_whose_str_raises_is_excluded(
    warm: Warm, tmp_path: Path
) -> None:
    """A candidate whose launch function (or whose check) raises such an error is excluded,
    as one raising any other exception is; the tune picks among the rest."""
    workload = tmp_path / "w.py"
    workload.write_text(
        "import numpy as np\nfrom warmcli import Kernel, Tunable\n"
        + APP_ERROR
        + """
def launch(rt, k, x, *, stream=None):
    if k.define("BAD") == "1":
        raise AppError(7)
    rt.launch(k, x, stream=stream)
def check(outputs, inputs):
    if outputs[0][0] > 2.5:
        raise AppError(8)
SRC = "void k(float *x) { x[0] += 1 + BAD; }"
T = Tunable("t", {f"c{b}": Kernel(SRC, "k", "P", defines={"BAD": b}) for b in (0, 1, 2)},
            launch, check=check)
def workload(rt):
    x = rt.upload(np.zeros(1, np.float32))
    rt.tune(T, x)
"""
    )
    bundle = tmp_path / "b.warm"
    done = warm("run", workload, "-b", bundle, "-q")
    assert done.returncode == 0, done.stderr
    stats = json.dumps(warm.json("stats", bundle))
    assert stats.count("AppError") == 2, stats
    assert stats.count("<exception str() failed>") == 2, stats


@pytest.mark.parametrize("letter", ["f", "d"])
def test_a_long_double_past_the_letters_range_is_refused_not_passed_as_inf(
    warm: Warm, tmp_path: Path, letter: str
) -> None:
    """A finite `np.longdouble` beyond what the letter's type holds is refused, as a
    float64 beyond `f`'s range is (it was passed as inf); an inf given stays inf."""
    ctype = {"f": "float", "d": "double"}[letter]
    workload = tmp_path / "w.py"
    workload.write_text(
        f"""import numpy as np
from warmcli import Kernel
K = Kernel("void k({ctype} *o, {ctype} v) {{ o[0] = v; }}", "k", "P{letter}")
def workload(rt):
    o = rt.buffer(1, "{ctype.replace("float", "float32").replace("double", "float64")}")
    rt.launch(K, o, np.longdouble("inf"))
    rt.launch(K, o, np.longdouble("-1e4000"))
"""
    )
    done = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    _one_line_error(done, "w.py:7", f"argument 2 ('{letter}',", "rounds to a finite one")


def test_a_package_run_with_dash_m_runs_its_main_module_as_python_does(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm run -m app`, where `python -m app` runs the package's `__main__.py`, takes the
    workload from there (its relative imports working); a package without one keeps
    its own `workload`."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "kernels.py").write_text(
        'from warmcli import Kernel\nK = Kernel("void k(int *x) { x[0] += 5; }", "k", "P")\n'
    )
    (app / "__main__.py").write_text(
        "import numpy as np\nfrom .kernels import K\n"
        "def workload(rt):\n    rt.launch(K, rt.upload(np.zeros(1, np.int32)))\n"
        'if __name__ == "__main__":\n    raise SystemExit("not as a script")\n'
    )
    bundle = tmp_path / "b.warm"
    done = warm("run", "-m", "app", "-b", bundle, "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "stored 1 new kernel(s)" in done.stdout, done.stdout
    (app / "__main__.py").unlink()
    (app / "__init__.py").write_text("def workload(rt):\n    pass\n")
    done = warm("run", "-m", "app", "-b", bundle, "-q", cwd=tmp_path)
    assert done.returncode == 0, done.stderr


# A checked tunable whose check and launch function (and a helper in the check) have
# docstrings; `python -OO` (or PYTHONOPTIMIZE=2) strips them, and nothing else.
DOCUMENTED = """
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
def adds_one(value):
    \"\"\"Whether a candidate added one.\"\"\"
    return value == 1.0
def check(outputs, inputs):
    \"\"\"Every candidate must add one.\"\"\"
    def first(o):
        \"\"\"The first element.\"\"\"
        return o[0][0]
    return bool(adds_one(first(outputs)))
def launch(rt, k, y, *, stream=None):
    \"\"\"Launch one candidate.\"\"\"
    rt.launch(k, y, stream=stream)
SRC = "void k(float *y) { y[0] += 1 + I - I; }"
T = Tunable("t", {f"c{i}": Kernel(SRC, "k", "P", defines={"I": i}) for i in range(3)}, launch,
            check=check)
def workload(rt):
    y = rt.upload(np.zeros(1, np.float32))
    rt.tune(T, y)
    return y
"""
STRICT_SERVE = """
import runpy, sys, warmcli
module = runpy.run_path(sys.argv[1])
rt = warmcli.runtime()
print(rt.read(module["workload"](rt))[0])
"""


def test_a_docstring_python_oo_strips_keeps_a_checked_tune_served(
    warm: Warm, tmp_path: Path
) -> None:
    """A checked tune warmed by plain `python` is served to a production process run with
    `python -OO`, which strips docstrings (and the other way round): a docstring is no
    part of what a check or launch function does, so none is in its key."""
    workload = tmp_path / "w.py"
    workload.write_text(DOCUMENTED)
    for warm_flags, serve_flags in (((), ("-OO",)), (("-OO",), ())):
        bundle = tmp_path / f"b{len(warm_flags)}.warm"
        done = subprocess.run(
            [sys.executable, *warm_flags, "-m", "warmcli", "run", workload, "-b", bundle, "-q"],
            capture_output=True, text=True, env=warm.env, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_STRICT="1")
        served = subprocess.run(
            [sys.executable, *serve_flags, "-c", STRICT_SERVE, workload],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert served.returncode == 0, served.stderr
        assert served.stdout.strip() == "1.0", served.stdout


@pytest.mark.parametrize("name", ["prep_job.py", "prep-job.py"])
def test_a_workload_using_a_spawn_pool_runs_as_under_python(
    warm: Warm, tmp_path: Path, name: str
) -> None:
    """A workload that maps a function of its own over a `spawn` (or `forkserver`) pool, as
    `python w.py` runs it: the workers unpickle the function by its module's name, which
    they must be able to import (it was warm's private name: every worker died at once,
    the pool started new ones, and `warm run` hung). A file name that is no identifier
    too: Python imports `prep-job` from `prep-job.py` all the same."""
    workload = tmp_path / name
    workload.write_text(
        """import multiprocessing as mp
import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void k(float *y, long n) { for (long i = 0; i < n; i++) y[i] *= 2; }", "k", "Pl")
def prep(i):
    return float(i) * 1.5
def workload(rt):
    with mp.get_context("spawn").Pool(1) as pool:
        values = pool.map(prep, range(4))
    y = rt.upload(np.array(values, np.float32))
    rt.launch(K, y, 4)
    return y
"""
    )
    done = warm("run", workload, "-b", tmp_path / "b.warm", "-q", timeout=90)
    assert done.returncode == 0, done.stderr
    assert "stored 1 new kernel(s)" in done.stdout, done.stdout


def test_a_relative_module_name_is_refused_in_one_line(warm: Warm, tmp_path: Path) -> None:
    """`warm run -m .main` (as `python -m .main`, which says relative names are not
    supported) is one line naming the module, not importlib's frozen frame."""
    done = warm("run", "-m", ".main", "-b", tmp_path / "b.warm", "-q", cwd=tmp_path)
    _one_line_error(done, ".main", "relative")
    assert "frozen" not in done.stderr, done.stderr


def test_a_module_beside_the_workload_may_import_it_back_as_under_python(
    warm: Warm, tmp_path: Path
) -> None:
    """A module beside the workload that imports names from it while it is being imported
    (a circular `from app import SCALE`) gets a copy of it of its own, as under Python, so
    the workload being known by its file's name (for spawned workers) changes nothing."""
    (tmp_path / "helpers.py").write_text("from app import SCALE\ndef scale():\n    return SCALE\n")
    (tmp_path / "app.py").write_text(
        "import numpy as np\nimport helpers\nfrom warmcli import Kernel\nSCALE = 3\n"
        'K = Kernel("void k(float *y) { y[0] += 1; }", "k", "P")\n'
        "def workload(rt):\n    assert helpers.scale() == 3\n"
        "    rt.launch(K, rt.upload(np.zeros(1, np.float32)))\n"
    )
    done = warm("run", tmp_path / "app.py", "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 0, done.stderr


def test_a_tunable_made_inside_the_workload_is_served_strict(warm: Warm, tmp_path: Path) -> None:
    """A checked tunable made as the workload runs, whose check (a lambda) calls a helper of
    the workload's module: `warm run` keys it as a production process does (the helper
    counted as of the check's own module in both), so its tune is served strict."""
    workload = tmp_path / "tuned_inside.py"
    workload.write_text(
        """import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
TOL = 0.5
def within(outputs):
    return abs(float(outputs[0][0]) - 1.0) < TOL
SRC = "void k(float *y) { y[0] += 1 + I - I; }"
def workload(rt):
    t = Tunable("t", {f"c{i}": Kernel(SRC, "k", "P", defines={"I": i}) for i in range(2)},
                lambda rt, k, y, *, stream=None: rt.launch(k, y, stream=stream),
                check=lambda outputs, inputs: within(outputs))
    y = rt.upload(np.zeros(1, np.float32))
    rt.tune(t, y)
    return y
"""
    )
    bundle = tmp_path / "b.warm"
    done = warm("run", workload, "-b", bundle, "-q")
    assert done.returncode == 0, done.stderr
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_STRICT="1")
    served = _python(env).run(STRICT_SERVE, str(workload), env=env, cwd=ROOT, timeout=300)
    assert served.returncode == 0, served.stderr
    assert served.stdout.strip() == "1.0", served.stdout


# Realistic small programs, each cut short by PART=1 (what a bundle warmed from part of it
# holds). `SERVE_ALL` runs one as production does and prints its results' bytes.
DTYPES_WORKLOAD = r'''
import os
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
PART = os.environ.get("PART") == "1"
HALF = Kernel("""
#include <stdint.h>
void h2(uint16_t *x, long n) { for (long i = 0; i < n; i++) x[i] ^= 0x8000; }""", "h2", "Pl")
CPLX = Kernel("""
#include <complex.h>
void cmul(float complex *x, const float complex *y, long n) {
    for (long i = 0; i < n; i++) x[i] = x[i] * y[i]; }""", "cmul", "PPl")
U64 = Kernel("""
#include <stdint.h>
#include <stdbool.h>
void u64(uint64_t *x, const bool *m, long n, uint64_t add, int8_t s) {
    for (long i = 0; i < n; i++) x[i] = m[i] ? x[i] + add : (uint64_t)(int64_t)s; }""",
    "u64", "PPlQb")
F64 = Kernel("""
void f64(double *x, long n, double v) { for (long i = 0; i < n; i++) x[i] = x[i] * 2 + v; }""",
             "f64", "Pld", defines={"NEG": -3, "NAME": '"f64"', "RATIO": 0.1})
SCALE = Tunable("scale", {f"u{u}": Kernel(f"""
void scale(float *x, long n) {{
    for (long i = 0; i < n; i += {u})
        for (int j = 0; j < {u} && i + j < n; j++) x[i + j] += 1; }}""",
    "scale", "Pl") for u in (1, 2, 3, 4, 8)},
    lambda rt, k, x, n, *, stream=None: rt.launch(k, x, n, stream=stream))
def workload(rt):
    out = []
    h = rt.upload(np.array([1.5, -0.0, np.inf, np.nan, 65504], dtype=np.float16))
    rt.launch(HALF, h, 5); out.append(h)
    a = np.asfortranarray(np.arange(12, dtype=np.complex64).reshape(3, 4) * (1 + 2j))
    c, c2 = rt.upload(a), rt.upload(a[:, ::2].T)  # Fortran order, a strided view
    rt.launch(CPLX, c, c, 12); out.append(c)
    if not PART:
        rt.launch(CPLX, c2, c2, 6); out.append(c2)
    x = rt.upload(np.array([0, 2**64 - 1, 2**63, 5], dtype=np.uint64))
    m = rt.upload(np.array([True, True, False, True]))
    rt.launch(U64, x, m, 4, 2**64 - 1, -128); out.append(x)
    z = rt.upload(np.zeros(0)); rt.launch(F64, z, 0, float("-inf")); out.append(z)
    one = rt.upload(np.array([3.0])); rt.launch(F64, one, 1, float("nan")); out.append(one)
    for n in (7,) if PART else (7, 1, 0):
        f = rt.upload(np.linspace(0, 1, n, dtype=np.float32)); rt.tune(SCALE, f, n); out.append(f)
    return out
'''
GENERATOR_WORKLOAD = r'''
import asyncio, os, threading
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
SIZES = [(4, 5), (1, 1), (0, 3)][: 1 if os.environ.get("PART") == "1" else 3]
STENCILS = {(r, sign): Kernel(f"""
void st_{r}(float *out, const float *in, long m, long n) {{
  for (long i = 0; i < m; i++) for (long j = 0; j < n; j++) {{
    float s = 0; int c = 0;
    for (long di = -R; di <= R; di++) for (long dj = -R; dj <= R; dj++) {{
      long a = i + di, b = j + dj;
      if (a >= 0 && a < m && b >= 0 && b < n) {{ s += in[a * n + b]; c++; }}
    }}
    out[i * n + j] = SIGN * s / (c ? c : 1) + OFFSET;
  }}
}}""", f"st_{r}", "PPll", defines={"R": r, "SIGN": sign, "OFFSET": "(-1.5f)"})
    for r in range(2) for sign in (-1, 1)}
RED = Tunable("red", {f"u{u}_{o}": Kernel("""
void red(double *out, const float *in, long n) {
  double s = 0; long i = 0;
  for (; i + UNROLL <= n; i += UNROLL) for (int u = 0; u < UNROLL; u++) s += in[i + u];
  for (; i < n; i++) s += in[i];
  out[0] = s;
}""", "red", "PPl", defines={"UNROLL": u}, options=(o,)) for u in (1, 4) for o in ("-O1", "-O2")},
    lambda rt, k, out, x, n, *, stream=None: rt.launch(k, out, x, n, stream=stream),
    check="u1_-O1", restore=())
def workload(rt):
    rng = np.random.default_rng(7)
    for m, n in SIZES:
        x = rt.upload(rng.integers(-8, 8, (m, n)).astype(np.float32))
        ys = {key: rt.buffer((m, n)) for key in sorted(STENCILS)}
        def run(key, y=None):
            stream = rt.stream()
            rt.launch(STENCILS[key], ys[key], x, m, n, stream=stream)
            stream.synchronize()
        threads = [threading.Thread(target=run, args=(key,)) for key in sorted(STENCILS)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        for key in sorted(STENCILS):
            total = rt.buffer(1, "float64")
            rt.tune(RED, total, ys[key], m * n)
            yield ys[key]
            yield total
'''
SERVE_ALL = """
import json, runpy, sys
import warmcli
module = runpy.run_path(sys.argv[1])
rt = warmcli.runtime()
out = list(module["workload"](rt))  # a generator workload runs as it is iterated
report = warmcli.report()
print(json.dumps({"out": [rt.read(b).tobytes().hex() + str(rt.read(b).shape) for b in out],
                  "kernels": len(report.kernels), "tunes": len(report.tunes)}))
"""


@pytest.mark.parametrize("program", [DTYPES_WORKLOAD, GENERATOR_WORKLOAD], ids=["dtypes", "gen"])
def test_cold_miss_and_hit_compute_the_same(warm: Warm, tmp_path: Path, program: str) -> None:
    workload = tmp_path / "program.py"
    workload.write_text(program)

    def serve(bundle: Path | None, **env: str) -> dict[str, object]:
        given = dict(warm.env, WARM_BUNDLE=str(bundle) if bundle else "", **env)
        done = _python(given).run(SERVE_ALL, str(workload), env=given, cwd=ROOT, timeout=300)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    cold = serve(None)
    assert cold["kernels"] and cold["tunes"]
    hit, miss = tmp_path / "hit.warm", tmp_path / "miss.warm"
    done = warm("run", workload, "-b", hit, "-q")
    assert done.returncode == 0 and "the bundle is complete" in done.stdout, done.stderr
    warm.env["PART"] = "1"
    done = warm("run", workload, "-b", miss, "-q")
    del warm.env["PART"]
    assert done.returncode == 0, done.stderr
    served = serve(hit, WARM_STRICT="1")
    assert (served["kernels"], served["tunes"]) == (0, 0)
    assert served["out"] == cold["out"]
    missed = serve(miss)
    assert missed["tunes"], missed
    assert missed["out"] == cold["out"]


@pytest.mark.parametrize(
    ("options", "attribute"),
    [
        (("-std=c99", "-pedantic-errors"), ""),
        (("-ansi", "-Wall", "-Wpedantic", "-Werror"), ""),
        (("-O2", "-Wall", "-Werror"), "__attribute__((nonnull)) "),
        (("-Werror", "-Wc++-compat", "-Wstrict-prototypes"), "__attribute__((nonnull)) "),
    ],
)
def test_a_kernel_built_strict_to_its_standard_compiles_as_cc_builds_it(
    warm: Warm, tmp_path: Path, options: tuple[str, ...], attribute: str
) -> None:
    """A kernel whose options hold it to C99 or C89 with pedantic errors, or one declared
    `nonnull` built with `-Wall -Werror`, which cc builds alone, compiles under warm too
    (warm's signature probe, C11's `_Static_assert` and `_Generic`, failed the first, and
    its call with null pointers the last); the probe still catches letters that do not
    match."""
    source = (
        "static float twice(float v) { return 2 * v; }\n"
        f"{attribute}void scale(float *y, int n) "
        "{ int i; for (i = 0; i < n; i++) y[i] = twice(y[i]); }\n"
    )
    workload = tmp_path / "w.py"
    workload.write_text(
        "import numpy as np\nfrom warmcli import Kernel\n"
        f"K = Kernel({source!r}, 'scale', 'Pi', options={options!r})\n"
        f"BAD = Kernel({source!r}, 'scale', 'Pl', options={options!r})\n"
        "def workload(rt):\n    rt.launch(K, rt.upload(np.ones(3, np.float32)), 3)\n"
    )
    done = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 0, done.stderr
    workload.write_text(workload.read_text() + "    rt.launch(BAD, rt.upload(np.ones(3)), 3)\n")
    done = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 2, done.stderr
    assert "parameter letters 'Pl' do not match" in done.stderr, done.stderr


def test_the_thread_pools_fork_hooks_are_registered_before_warm_forks() -> None:
    """`concurrent.futures.thread` registers at-fork hooks (its shutdown lock taken before a
    fork, released after it in the parent) when first imported. Imported by one thread's
    compile (warm's batch, lazily) while another thread forked a compiler and waited in
    warm's own at-fork hook for that import, the release ran without the take, on the lock
    the first thread then held: a cold process compiling from several threads failed now
    and then with `RuntimeError: release unlocked lock` in `pool.submit`. The module that
    forks warm's compilers imports it first, so every fork sees the hooks whole."""
    probe = (
        "import sys\nimport warmcli.backends.processes\n"
        "print('concurrent.futures.thread' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


@pytest.mark.parametrize("restore", ["lambda y, n: None", "lambda y, n: y"])
def test_a_restore_callable_giving_no_list_is_named(
    warm: Warm, tmp_path: Path, restore: str
) -> None:
    """A `restore=` callable that returns no list of buffers (None, or one buffer bare) is
    an error naming the tunable and what it gave, not Python's `'NoneType' object is not
    iterable`."""
    workload = tmp_path / "w.py"
    workload.write_text(
        "import numpy as np\nfrom warmcli import Kernel, Tunable\n"
        'SRC = "void k(int *y, long n) { for (long j = 0; j < n; j++) y[j] += 1 + I - I; }"\n'
        'T = Tunable("t", {f"c{i}": Kernel(SRC, "k", "Pl", defines={"I": i}) for i in range(2)},\n'
        "            lambda rt, k, y, n, *, stream=None: rt.launch(k, y, n, stream=stream),\n"
        f"            restore={restore})\n"
        "def workload(rt):\n    rt.tune(T, rt.upload(np.zeros(4, np.int32)), 4)\n"
    )
    done = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    _one_line_error(done, "tunable t: restore gave", "not a list of buffers")
