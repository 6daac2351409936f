"""Cold, miss and hit compute the same, on host workloads unlike the examples.

Each workload here returns the buffers it computed; a driver process runs it on the host
runtime and writes them to a `.npz`, cold (`WARM_BUNDLE=` empty), served by the bundle
`warm run` made (`WARM_REPORT=1` says it served everything) and, where a variant is given,
changed against that bundle (a partial miss, which must compile what changed and serve the
rest). Every array must match the cold one bit for bit. Real `warm run` and real cc (the
`warm` commands forks of a process that imported the CLI once, `Trial`'s `servers`; the
drivers forks of one that imported numpy and warmcli, `Trial`'s `pythons`).

Found here: a C kernel with `__attribute__((constructor))` shared a translation unit (one
binary) with other kernels, so a hit ran its constructor when any of them loaded, before the
kernels launched ahead of it (`srand(12345)` reseeded `rand()` for kernels that a cold start
ran unseeded): it is built alone now (build recipe 4), as is one whose options pre-include a
header or set a macro its source uses at file scope (`static int counter;` there was one
object for the unit). A relative `CPATH` entry was keyed from the working folder but given as
is to cc, which runs in a scratch folder: a cold start failed to compile what a bundle
served. A header read first by a relative name (`-include rv.h`) failed every host kernel's
compile, and an NVRTC kernel's edit of it was served the old cubin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Warm
from forked_cli import ForkedWarm
from forked_python import ForkedPythons

DRIVE = """
import os, runpy, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[1])))  # as under python w.py
import numpy as np
import pytest
import warmcli
rt = warmcli.runtime("host")
got = runpy.run_path(sys.argv[1])["workload"](rt)
rt.synchronize()
np.savez(sys.argv[2], **{name: rt.read(buffer) for name, buffer in got.items()})
"""


class Trial:
    """One workload in a folder of its own: run cold, warmed, served and changed. Given the
    forking servers (`servers`: conftest's `forking_servers`), its `warm` commands are forks
    of them (`tests/forked_cli.py`: what each says and stores is what is tested here, not
    how a process starts); given `pythons` (a `tests/forked_python.ForkedPythons`), its
    drivers are forks of a process that imported numpy and warmcli (what each computes is
    tested, not how it starts); without, each is a process started."""

    def __init__(
        self,
        folder: Path,
        source: str,
        name: str = "w.py",
        servers: Any = None,
        pythons: ForkedPythons | None = None,
    ) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.workload, self.bundle = folder, folder / name, folder / "b.warm"
        self.workload.write_text(source, encoding="utf-8")
        (folder / "drive.py").write_text(DRIVE)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
        self.env.update(WARM_HOME=str(folder / "home"), COLUMNS="200")
        self.runs = 0
        self.servers = servers
        self.pythons = pythons

    def _python(self, *args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, *map(str, args)],
            capture_output=True,
            text=True,
            env={**self.env, **env},
            cwd=self.folder,
            timeout=300,
        )

    def warm(self, *args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
        if self.servers is None:
            return self._python("-m", "warmcli", *args, **env)
        forked = ForkedWarm(Warm({**self.env, **env}), self.servers)
        return forked(*args, cwd=self.folder, timeout=300)

    def outputs(self, bundle: str, **env: str) -> tuple[dict[str, np.ndarray], str]:
        """What the workload computed, over `bundle` ('' for none), and the report."""
        self.runs += 1
        out = self.folder / f"out{self.runs}.npz"
        env = dict(env, WARM_BUNDLE=bundle, WARM_REPORT="1")
        if self.pythons is None:
            done = self._python(self.folder / "drive.py", self.workload, out, **env)
        else:
            env = {**self.env, **env}
            done = self.pythons(env).run(
                self.folder / "drive.py", str(self.workload), str(out), env=env, cwd=self.folder,
                timeout=300,
            )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        with np.load(out) as arrays:
            return {name: arrays[name] for name in arrays.files}, done.stderr

    def cold(self, **env: str) -> dict[str, np.ndarray]:
        return self.outputs("", **env)[0]

    def warmed(self, *options: str) -> str:
        done = self.warm("run", self.workload, "-b", self.bundle, "-q", *options)
        assert done.returncode == 0, done.stderr + done.stdout
        assert "Traceback" not in done.stderr, done.stderr
        return done.stderr

    def served(self, **env: str) -> tuple[dict[str, np.ndarray], str]:
        return self.outputs(str(self.bundle), **env)


@pytest.fixture(scope="module")
def pythons() -> Iterator[ForkedPythons]:
    """The module's driver processes' forking servers, one per environment apart from warm's
    own variables (`tests/forked_python.py`)."""
    servers = ForkedPythons(Path(__file__).resolve().parents[1])
    yield servers
    servers.close()


@pytest.fixture
def trial(forking_servers: Any, pythons: ForkedPythons) -> Callable[..., Trial]:
    """`trial(folder, source)`: a `Trial` whose `warm` commands and drivers are forked."""
    return lambda folder, source: Trial(folder, source, servers=forking_servers, pythons=pythons)


def same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    """`a` and `b` hold the same arrays, bit for bit."""
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and a[name].shape == b[name].shape, name
        assert a[name].tobytes() == b[name].tobytes(), (name, a[name], b[name])


def served_everything(report: str) -> None:
    assert "served everything: compiled 0 kernels, tuned 0 operations" in report, report


CONSTRUCTOR = r"""
from warmcli import Kernel
DEVICE = "host"
PLAIN = [Kernel("void a(int *o) { o[0] = rand() % 1000 + ID; }", "a", "P", defines={"ID": i})
         for i in range(3)]
SEEDS = Kernel(
    "__attribute__((constructor)) static void seed(void) { srand(12345); }\n"
    "void b(int *o) { o[0] = rand() % 1000; }", "b", "P")
def workload(rt):
    out = {}
    for i, k in enumerate(PLAIN):
        out[f"a{i}"] = rt.buffer(1, "int32")
        rt.launch(k, out[f"a{i}"])
    out["b"] = rt.buffer(1, "int32")
    rt.launch(SEEDS, out["b"])
    return out
"""


CPATH_WORKLOAD = r"""
from warmcli import Kernel
DEVICE = "host"
K = Kernel("#include <cpv.h>\nvoid c(int *o) { o[0] = CPV; }", "c", "P")
def workload(rt):
    o = rt.buffer(1, "int32")
    rt.launch(K, o)
    return {"o": o}
"""


def test_relative_and_empty_cpath_entries_are_the_working_folders_as_cc_reads_them(
    tmp_path: Path, trial: Callable[..., Trial]
) -> None:
    """`CPATH=sub` names `./sub` and `CPATH=:` the working folder, as cc reads them (an
    empty entry is the working folder). warm keyed `sub` from the working folder but ran cc
    in its scratch folder, where `sub` is not: a cold start failed to compile (`cpv.h: No
    such file or directory`) what a bundle warmed with the same folder named absolutely
    served; and it keyed an empty entry as no folder, so `CPATH=:` was a miss whose compile
    failed."""
    trial = trial(tmp_path, CPATH_WORKLOAD)
    (tmp_path / "cpv.h").write_text("#define CPV 7\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "cpv.h").write_text("#define CPV 2\n")
    trial.env["CPATH"] = str(tmp_path)
    trial.warmed()
    assert trial.cold(CPATH=":")["o"].tolist() == [7]
    hot, report = trial.served(CPATH=":")
    served_everything(report)
    assert hot["o"].tolist() == [7]
    missed, report = trial.served(CPATH="sub")
    assert "lacked 1 kernel(s)" in report and missed["o"].tolist() == [2], report


# Host workloads, one feature each, that a `suite.py` workload runs one after another (one
# `warm run`, one cold, one served and one changed process for them all). `WARM_TEST_D37_VARIANT=1`
# is the changed workload: each feature changes what it says (a define, a shape, an option),
# and the fixture edits the header `f_headers` includes, so each has a miss and a hit.
FEATURES: dict[str, str] = {
    "f_types": r'''
import os
from warmcli import Kernel
V = os.environ.get("WARM_TEST_D37_VARIANT", "0")
SRC = r"""
#include <stdint.h>
#include <stdbool.h>
void mix(int8_t a, uint8_t b, int16_t c, uint16_t d, int32_t e, uint32_t f, long g,
         unsigned long h, long long q, unsigned long long Q, _Bool z, float x, double y,
         int8_t *pa, uint16_t *pd, int64_t *pg, double *py, bool *pz, float *px) {
    pa[0] = (int8_t)(a + 1); pd[0] = (uint16_t)(d * 2u);
    pg[0] = g + (long)h + q + (long long)Q + e + (long)f + c + b + EXTRA;
    py[0] = y * x + (double)z; pz[0] = !z; px[0] = x / 3.0f;
}
"""
K = Kernel(SRC, "mix", "bBhHiIlLqQ?fdPPPPPP", defines={"EXTRA": V})
def workload(rt):
    pa, pd, pg = rt.buffer(1, "int8"), rt.buffer(1, "uint16"), rt.buffer(1, "int64")
    py, pz, px = rt.buffer(1, "float64"), rt.buffer(1, "bool"), rt.buffer(1, "float32")
    rt.launch(K, -128, 255, -32768, 65535, -2**31, 2**32 - 1, -2**63, 2**63, 2**62,
              2**64 - 1, True, 1.0000001, 1e300, pa, pd, pg, py, pz, px)
    return dict(pa=pa, pd=pd, pg=pg, py=py, pz=pz, px=px)
''',
    "f_defines": r'''
import os
from warmcli import Kernel
V = os.environ.get("WARM_TEST_D37_VARIANT", "0") == "1"
SRC = r"""
void f(double *o, int n) {
    const char *s = LABEL;
    int len = 0;
    while (s[len]) len++;
    for (int i = 0; i < n; i++) o[i] = len * SCALE + i * 0.1 + s[0];
#ifdef FAST
    o[0] = -1.0 / 3.0;
#endif
}
"""
KS = [
    Kernel(SRC, "f", "Pi", defines={"SCALE": 3, "LABEL": '"a b \\" c"'}, options=("-O2",)),
    Kernel(SRC, "f", "Pi", defines={"SCALE": 3, "LABEL": '"x"'},
           options=("-O3",) if V else ("-O0",)),
    Kernel(SRC, "f", "Pi", defines={"SCALE": "(1+1)", "LABEL": '"y"', "FAST": 1},
           options=("-O1", "-ffast-math")),
    Kernel(SRC, "f", "Pi", defines={"LABEL": '"sp ace"'},
           options=("-DSCALE=" + ("5" if V else "4"),)),
]
def workload(rt):
    out = {}
    for j, k in enumerate(KS):
        out[f"k{j}"] = rt.buffer(5, "float64")
        rt.launch(k, out[f"k{j}"], 5)
    return out
''',
    "f_state": r'''
import os
from warmcli import Kernel
STEP = 2 if os.environ.get("WARM_TEST_D37_VARIANT", "0") == "1" else 1
SRC = r"""
static int count;
static long total = 100;
static int bump(int by) { count += by * STEP; total += by; return count; }
void inc(int *o, int by) { o[0] = bump(by); o[1] = (int)total; }
void get(int *o) { o[2] = count + 1000 * (int)sizeof(count); }
"""
INC = Kernel(SRC, "inc", "Pi", defines={"STEP": STEP})
GET = Kernel(SRC, "get", "P", defines={"STEP": STEP})
AGAIN = Kernel(SRC, "inc", "Pi", defines={"STEP": STEP}, name="inc-again")  # INC's key
FIXED = Kernel(SRC, "inc", "Pi", defines={"STEP": 7})
def workload(rt):
    o, p = rt.buffer(3, "int32"), rt.buffer(3, "int32")
    for by in range(4):
        rt.launch(INC, o, by)
        rt.launch(AGAIN, o, by)
        rt.launch(FIXED, p, by)
    rt.launch(GET, o)
    return dict(o=o, p=p)
''',
    "f_threads": r"""
import os
import threading
import numpy as np
import pytest
from warmcli import Kernel, Tunable
N = 300 if os.environ.get("WARM_TEST_D37_VARIANT", "0") == "1" else 200
SRC = "void axpy(float *y, const float *x, float a, int n) " \
      "{ for (int i = 0; i < n; i++) y[i] += a * x[i] + OFF; }"
KS = [Kernel(SRC, "axpy", "PPfi", defines={"OFF": i}, name=f"axpy{i}") for i in range(2)]
def launch(rt, k, y, x, a, n, *, stream=None):
    rt.launch(k, y, x, a, n, stream=stream)
# Candidates that compute the same (the pick must not matter), and two that tie (one key).
SAME = Tunable("same", {f"c{o}": Kernel(SRC, "axpy", "PPfi", defines={"OFF": 0},
                                          options=(f"-O{o}",)) for o in (0, 2)},
               launch, check="c0", check_tolerance=(0.0, 0.0))
TIE = Tunable("tie", {"x": Kernel(SRC, "axpy", "PPfi", defines={"OFF": "0.0f"}),
                      "y": Kernel(SRC, "axpy", "PPfi", defines={"OFF": "0.0f"}, name="twin")},
              launch, warmup=0, repeats=1)
def workload(rt):
    x = rt.upload(np.linspace(0, 1, N, dtype=np.float32))
    ys = [rt.upload(np.full(N, i, dtype=np.float32)) for i in range(2)]
    def run(i):
        s = rt.stream()
        for _ in range(3):
            rt.launch(KS[i], ys[i], x, 0.5, N, stream=s)
        rt.tune(SAME, ys[i], x, 2.0, N, stream=s)
        rt.tune(TIE, ys[i], x, 1.5, N, stream=s)
    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rt.synchronize()
    return {f"y{i}": y for i, y in enumerate(ys)}
""",
    "f_tunes": r'''
import os
import numpy as np
import pytest
from warmcli import Kernel, Tunable
SHAPES = (6, 9, 64) if os.environ.get("WARM_TEST_D37_VARIANT", "0") == "1" else (5, 8, 33)
SRC = r"""
void acc(float *y, const float *x, int n, int reps) {
    for (int r = 0; r < reps * SLOW; r++) { volatile float z = r; (void)z; }
    for (int i = 0; i < n; i++) y[i] = y[i] * 0.5f + x[i];
}
"""
def launch(rt, k, y, x, n, *, stream=None):
    rt.launch(k, y, x, n, 1, stream=stream)
def check(outputs, inputs):
    y, x, n = inputs
    return np.array_equal(outputs[0], y * np.float32(0.5) + x)
BUCKETED = Tunable("acc", {f"s{s}": Kernel(SRC, "acc", "PPii", defines={"SLOW": s})
                           for s in (1, 3000)}, launch, bucket="pow2", check=check)
KEYED = Tunable("acc2", {f"s{s}": Kernel(SRC, "acc", "PPii", defines={"SLOW": s})
                         for s in (2, 4)}, launch, key=lambda y, x, n: n % 3,
                restore=("y",), warmup=2, repeats=3)
def workload(rt):
    out = {}
    for n in SHAPES:
        x = rt.upload(np.arange(n, dtype=np.float32) / 7)
        y = rt.upload(np.ones(n, dtype=np.float32))
        for _ in range(2):
            rt.tune(BUCKETED, y, x, n)
            rt.tune(KEYED, y, x, n)
        out[f"y{n}"] = y
    return out
''',
    "f_headers": r"""
import os
from warmcli import Kernel, Tunable
INC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inç ☃")
SRC = '#include "cfg.h"\n#include "top.h"\nvoid h(double *o) { o[0] = HV; o[1] = hv(); }'
K = Kernel(SRC, "h", "P", options=("-I" + INC,))
PRE = Kernel("void g(double *o) { o[0] = HV + 1; }", "g", "P",
             options=("-include", os.path.join(INC, "cfg.h")))
ABS = Kernel('#include "' + os.path.join(INC, "cfg.h") + '"\n'
             "void g3(double *o) { o[0] = HV + 2; }", "g3", "P")
def launch(rt, k, o, *, stream=None):
    rt.launch(k, o, stream=stream)
T = Tunable("th", {"a": K, "b": Kernel(SRC, "h", "P", options=("-I" + INC, "-O1"))}, launch)
def workload(rt):
    out = {name: rt.buffer(2, "float64") for name in ("o", "pre", "abs", "tuned")}
    rt.launch(K, out["o"])
    rt.launch(PRE, out["pre"])
    rt.launch(ABS, out["abs"])
    rt.tune(T, out["tuned"])
    return out
""",
    "f_unicode": r'''
from warmcli import Kernel, Tunable
HELPERS = "\n".join(f"static int helper_{i}(int v) {{ return v * {i % 13} + {i}; }} /* ☃ {i} é */"
                    for i in range(300))
SRC = HELPERS + r"""
// naïve ☃
void uni(long *o, int n) {
    const char *s = "日本語" LBL;
    long len = 0;
    while (s[len]) len++;
    o[0] = len; o[1] = helper_299(n) + helper_1(n); o[2] = (unsigned char)s[0];
}
"""
K = Kernel(SRC, "uni", "Pi", defines={"LBL": '"ñ ☃ \\" x"'}, name="ユニ☃")
def launch(rt, k, o, n, *, stream=None):
    rt.launch(k, o, n, stream=stream)
T = Tunable("tün☃", {"α": K, "β": Kernel(SRC, "uni", "Pi", defines={"LBL": '"ñ ☃ \\" x"'},
                                          options=("-O1",))}, launch)
def workload(rt):
    o, p = rt.buffer(3, "int64"), rt.buffer(3, "int64")
    rt.launch(K, o, 7)
    rt.tune(T, p, 8)
    return dict(o=o, p=p)
''',
    "f_macros": r'''
from warmcli import Kernel
SRC = r"""
void m%d(long *o) {
  o[0] = __COUNTER__; o[1] = __COUNTER__; o[2] = __LINE__;
  o[3] = (long)sizeof(__FILE__); o[4] = __INCLUDE_LEVEL__; o[5] = (long)sizeof(__func__);
}
"""
KS = [Kernel(SRC % i, f"m{i}", "P") for i in range(2)]
LINES = [Kernel("\n" * i + "void n(long *o) { o[0] = __LINE__ + ID; }", "n", "P",
                defines={"ID": i}) for i in range(2)]
def workload(rt):
    out = {}
    for j, k in enumerate(KS + LINES):
        out[f"k{j}"] = rt.buffer(6, "int64")
        rt.launch(k, out[f"k{j}"])
    return out
''',
    "f_constructor": CONSTRUCTOR.replace('DEVICE = "host"\n', ""),
    "f_option_state": r"""
import os
from warmcli import Kernel
STATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "state.h")  # static int counter;
SRC = "void k(int *o) { counter += ID; o[0] = counter; }"
PRE = [Kernel(SRC, "k", "P", defines={"ID": i}, options=("-include", STATE)) for i in (1, 2)]
DECL = [Kernel("DECL\n" + SRC, "k", "P", defines={"ID": i},
               options=("-DDECL=static int counter;",)) for i in (3, 4)]
def workload(rt):
    out = {}
    for i, k in enumerate(PRE + DECL):
        out[f"k{i}"] = rt.buffer(1, "int32")
        rt.launch(k, out[f"k{i}"])
        rt.launch(k, out[f"k{i}"])
    return out
""",
}
SUITE = (
    "DEVICE = 'host'\n"
    "import importlib\n"
    f"FEATURES = {sorted(FEATURES)!r}\n"
    "def workload(rt):\n"
    "    out = {}\n"
    "    for name in FEATURES:\n"
    "        got = importlib.import_module(name).workload(rt)\n"
    "        out.update({f'{name}__{k}': v for k, v in got.items()})\n"
    "    return out\n"
)


class Suite:
    """What the suite computed: cold, served and changed (see `suite`)."""

    cold: dict[str, np.ndarray]
    hot: dict[str, np.ndarray]
    hot_report: str
    changed_cold: dict[str, np.ndarray]
    changed: dict[str, np.ndarray]
    changed_report: str
    trial: Trial


@pytest.fixture(scope="module")
def suite(
    tmp_path_factory: pytest.TempPathFactory, forking_servers: Any, pythons: ForkedPythons
) -> Suite:
    """Every feature, in a folder whose name is not ASCII: run cold, warmed (`-j 1`: one
    compiler process, so every kernel that may share a unit shares one), served, then
    changed (`WARM_TEST_D37_VARIANT=1`, `f_headers`' header edited) cold and over the bundle."""
    folder = tmp_path_factory.mktemp("d37") / "ünï cødé ☃"
    trial = Trial(folder, SUITE, name="suite.py", servers=forking_servers, pythons=pythons)
    for name, source in FEATURES.items():
        (folder / f"{name}.py").write_text(source, encoding="utf-8")
    headers = folder / "inç ☃"
    headers.mkdir()
    (headers / "cfg.h").write_text("#define HV 1.5\n", encoding="utf-8")
    (headers / "top.h").write_text('#include "sub.h"\n')
    (headers / "sub.h").write_text("static double hv(void) { return HV * 2; }\n")
    (folder / "state.h").write_text("static int counter;\n")
    got = Suite()
    got.trial = trial
    got.cold = trial.cold()
    trial.warmed("-j", "1")
    got.hot, got.hot_report = trial.served()
    (headers / "sub.h").write_text("static double hv(void) { return HV * 3; }\n")
    got.changed_cold = trial.cold(WARM_TEST_D37_VARIANT="1")
    got.changed, got.changed_report = trial.served(WARM_TEST_D37_VARIANT="1")
    return got


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_cold_and_served_compute_the_same(suite: Suite, feature: str) -> None:
    served_everything(suite.hot_report)
    mine = {k: v for k, v in suite.cold.items() if k.startswith(feature + "__")}
    assert mine
    same(mine, {k: suite.hot[k] for k in mine})
    changed = {k: v for k, v in suite.changed_cold.items() if k.startswith(feature + "__")}
    same(changed, {k: suite.changed[k] for k in changed})


def test_a_kernel_with_a_constructor_runs_it_when_it_loads_served_as_cold(suite: Suite) -> None:
    """`rand()` is the process's: a cold start runs `f_constructor`'s six plain kernels
    unseeded, then loads `b`, whose constructor seeds it. Batched with them (and every
    other kernel that may share a unit: `-j 1`) into one binary, a hit ran that constructor
    when the first of them loaded: every output of it differed."""
    mine = sorted(k for k in suite.cold if k.startswith("f_constructor__"))
    assert len(mine) == 4
    same({k: suite.cold[k] for k in mine}, {k: suite.hot[k] for k in mine})


def test_the_changed_suite_misses_what_changed_and_is_served_the_rest(suite: Suite) -> None:
    """The changed workload's report names the kernels and tunes it compiled and measured
    (a define, an option, a header, shapes), and no more: the rest was served."""
    report = suite.changed_report
    assert "lacked" in report and "Traceback" not in report, report
    named = [line.strip() for line in report.splitlines()[1:] if line.startswith("  ")]
    kernels = [line for line in named if line.startswith("kernel ")]
    tunes = [line for line in named if line.startswith("tune ")]
    for expected in ("mix[EXTRA=1]", 'f[LABEL="x",SCALE=3]', "inc[STEP=2]", "get[STEP=2]"):
        assert any(line.startswith(f"kernel {expected} ") for line in kernels), (expected, report)
    assert sum(line.startswith("kernel h ") for line in kernels) == 2, report  # header edited
    unchanged = (
        "kernel m0 ",
        "kernel n[",
        "kernel a[",
        "kernel b ",
        "kernel ユニ",
        "kernel g ",
        "kernel g3 ",
    )
    assert not any(line.startswith(unchanged) for line in kernels), report
    assert any(line.startswith("tune same ") for line in tunes), report  # N changed
    assert any(line.startswith("tune acc float32[16]") for line in tunes), report
    assert not any(line.startswith("tune tün") for line in tunes), report


def test_verify_and_stats_describe_the_suite_bundle(suite: Suite) -> None:
    """`warm stats --json` lists the kernels `warm run` stored, and `warm verify --workload`
    names what the edited header changed, and what the changed workload changed (exit 1)."""
    trial = suite.trial
    stats = trial.warm("stats", trial.bundle, "--json")
    assert stats.returncode == 0, stats.stderr
    listed = json.loads(stats.stdout)
    labels = {k["label"] for k in listed["kernels"]}
    assert {"mix[EXTRA=0]", 'ユニ☃[LBL="ñ ☃ \\" x"]', "b", "g3"} <= labels, labels
    verified = trial.warm("verify", trial.bundle, "--workload", trial.workload, "-q")
    assert verified.returncode == 1, verified.stderr + verified.stdout
    misses = [line for line in verified.stdout.splitlines() if line.startswith("miss: ")]
    assert misses and all(  # since the fixture edited its header, and nothing else
        line.startswith(("miss: kernel h: headers: ", "miss: tune th float64[2]: checksum"))
        for line in misses
    ), verified.stdout
    changed = trial.warm(
        "verify", trial.bundle, "--workload", trial.workload, "-q", WARM_TEST_D37_VARIANT="1"
    )
    assert changed.returncode == 1, changed.stderr + changed.stdout
    out = changed.stdout + changed.stderr
    said = "miss: kernel mix[EXTRA=1]: defines: bundle has EXTRA=0, this process wants EXTRA=1"
    assert said in out, out
    assert "Traceback" not in out, out


PRE_INCLUDED = r"""
from warmcli import Kernel
DEVICE = "host"
KS = [Kernel("void a(int *o) { o[0] = RV; }", "a", "P", options=("-include", "rv.h")),
      Kernel("void c(int *o) { o[0] = RV2; }", "c", "P", options=("-imacros", "sub/rv2.h"))]
def workload(rt):
    out = {}
    for i, k in enumerate(KS):
        out[f"k{i}"] = rt.buffer(1, "int32")
        rt.launch(k, out[f"k{i}"])
    return out
"""


def test_a_header_read_first_by_a_relative_name_is_the_working_folders_and_keyed(
    tmp_path: Path, trial: Callable[..., Trial]
) -> None:
    """cc reads `-include rv.h` (`-imacros sub/rv2.h`) from its working folder first: warm
    ran cc in a scratch folder, so every such kernel failed to compile (`rv.h: No such file
    or directory`), cold and under `warm run`. It is the working folder's file now, for the
    compiler and the key: an edit of it is a miss, never the old build."""
    trial = trial(tmp_path, PRE_INCLUDED)
    (tmp_path / "rv.h").write_text("#define RV 3\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "rv2.h").write_text("#define RV2 4\n")
    trial.warmed()
    hot, report = trial.served()
    served_everything(report)
    assert {k: v.tolist() for k, v in hot.items()} == {"k0": [3], "k1": [4]}
    (tmp_path / "rv.h").write_text("#define RV 30\n")
    (tmp_path / "sub" / "rv2.h").write_text("#define RV2 40\n")
    missed, report = trial.served()
    assert "lacked 2 kernel(s)" in report, report
    assert {k: v.tolist() for k, v in missed.items()} == {"k0": [30], "k1": [40]}


def test_kernels_whose_options_declare_state_keep_it_their_own(suite: Suite) -> None:
    """Two C kernels whose options pre-include a header declaring `static int counter;`
    (`-include state.h`), or define a macro that declares it (`-DDECL=static int
    counter;`, used at file scope), shared one unit, so one `counter`: a hit computed 6
    where a cold start, building each alone, computed 4. Each is built alone now."""
    mine = sorted(k for k in suite.cold if k.startswith("f_option_state__"))
    assert [int(suite.cold[k][0]) for k in mine] == [2, 4, 6, 8]
    same({k: suite.cold[k] for k in mine}, {k: suite.hot[k] for k in mine})


CUDA_PRE_INCLUDED = r"""
from warmcli import Kernel
DEVICE = "cuda"
K = Kernel('extern "C" __global__ void a(int *o) { o[0] = RV; }', "a", "P", language="cuda",
           options=("-include", "rv.h"))
def workload(rt):
    o = rt.buffer(1, "int32")
    rt.launch(K, o, grid=1, block=1)
"""


def test_an_nvrtc_kernels_relative_pre_included_header_edited_is_a_miss(
    tmp_path: Path, trial: Callable[..., Trial]
) -> None:
    """NVRTC, in process, reads `-include rv.h` from the working folder, but the key did not
    cover a header read first by a relative name: an edit of it was served the old cubin
    (`warm verify` said the bundle is complete)."""
    from warmcli.backends.cuda.nvrtc import find_nvrtc

    if find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    trial = trial(tmp_path, CUDA_PRE_INCLUDED)
    (tmp_path / "rv.h").write_text("#define RV 3\n")
    trial.warmed("--arch", "sm_90")
    (tmp_path / "rv.h").write_text("#define RV 4\n")
    done = trial.warm("verify", trial.bundle, "--workload", trial.workload, "--arch", "sm_90")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "miss: kernel a: headers: bundle has sha256" in done.stdout, done.stdout
