"""A new user's own workloads (round 29): a cold start, a miss and a hit compute the same.

Each workload below is one warm's authors had not seen, written from the README alone:
every scalar letter and several dtypes, many defines and options, a tune over a grid of
three parameters, a tune whose candidates fail now and then (a compile error, letters that
do not match, a launch that raises for some sizes, a check that rejects), kernels launched
and tuned from threads, kernels read from files beside the workload, kernels of one entry
name whose sources differ (helpers, tags, macros, only whitespace), a source of a
megabyte, unicode labels, and a tune whose launch runs more kernels and writes a buffer
held in an object. For each, through the real CLI and real production processes on the
host backend: the cold result (no bundle), the hot one (`warm run` of the workload, then
served: 0 compiled, 0 tuned) and the one served by a half-filled bundle (`warm run` of
part of it, then the whole served) are equal, bit for bit.

Bugs it found:
- a workload's `sys.argv` was warm's own command line (`run w.py -b ... -q`), so a workload
  that parses its command line (`argparse` in `workload()` or a script's `main()`) failed
  under `warm run` where `python w.py` runs it: it is now `[workload path]`, as Python
  gives a script run with no arguments;
- a tune candidate whose letters do not match its declaration was shown, by `warm stats`,
  `warm run`'s note and a failed tune's message, as the probe's raw `static assertion
  failed: "warm-signature:3:..."` instead of warm's explanation
  (`parameter letters 'PPi' do not match acc(...)`);
- a candidate calling a function nothing defines (a link error) was shown by gcc's
  implicit-declaration warning, not by ld's `undefined reference`;
- a production process that had to compile a kernel the bundle lacked, and failed (a
  workload that falls back to another kernel), reported `served everything: compiled 0
  kernels` while it ran the compiler at every start;
- a compile error's log named the entry by warm's renamed symbol (`In function
  'warm_50cada8a..._bad'`) rather than the user's function;
- a kernel whose options stop cc before it links (`-c`, `-E`, `-fsyntax-only`) blamed
  WARM_CC, or was stored and failed at load (`invalid ELF header`): it is now that
  kernel's compile failure, naming its options;
- a kernel that used a typedef, an enumerator or a struct tag only its neighbour in a
  shared translation unit declared compiled there, was stored and served hot, where alone
  (a cold start, a miss) it does not compile: tags, enumerators and typedef names are
  renamed apart now, as helpers are (a typedef of a function type: a unit of its own);
  likewise a helper warm did not rename (indented, or with `__attribute__((...))` before
  it) was called by a later kernel that does not define it: an attribute's helper is
  renamed now, an indented one's kernel compiled in a unit of its own.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Warm
from forked_python import ForkedPython

# A production process: the workload served on the host runtime; what it returns read back
# (as hex bytes, so equal means bit for bit), and what the process had to compile and tune.
SERVE = """
import json, runpy, sys
import warmcli
module = runpy.run_path(sys.argv[1])
rt = warmcli.runtime("host")
out = module["workload"](rt)
report = warmcli.report()
print(json.dumps({"out": [rt.read(b).tobytes().hex() for b in out],
                  "kernels": len(report.kernels), "tunes": len(report.tunes)}))
"""
HEAD = """
import os
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
PART = os.environ.get("TRIAL_PART") == "1"  # warm only part of the workload
"""

DTYPES = r'''
MIX = Kernel("""
#include <stdint.h>
#include <stdbool.h>
void mix(int64_t *out, int8_t a, uint8_t b, int16_t c, uint16_t d, int32_t e, uint32_t f,
         long long g, unsigned long long h, bool z) {
    out[0] = a; out[1] = b; out[2] = c; out[3] = d; out[4] = e; out[5] = (int64_t)f;
    out[6] = g; out[7] = (int64_t)h; out[8] = z;
}""", "mix", "PbBhHiIqQ?")
FLT = Kernel("""void flt(double *out, const float *x, float s, double t, int n) {
    for (int i = 0; i < n; i++) out[i] = (double)(x[i] * s) + t; }""", "flt", "PPfdi")
U16 = Kernel("""void u16(unsigned short *y, const unsigned char *x, int n) {
    for (int i = 0; i < n; i++) y[i] = (unsigned short)(x[i] * 257u); }""", "u16", "PPi")
NANS = Kernel("void nb(_Bool *y, const double *x, int n) "
              "{ for (int i = 0; i < n; i++) y[i] = x[i] != x[i]; }", "nb", "PPi")

def workload(rt):
    out = rt.buffer(9, "int64")
    rt.launch(MIX, out, -128, np.uint8(255), -32768, 65535, np.int32(-2**31), 2**32 - 1,
              -2**63, 2**64 - 1, True)
    x = rt.upload(np.array([1e-45, -0.0, 3.4e38, np.inf, np.nan, 1.5], dtype=np.float32))
    d = rt.buffer(6, "float64")
    rt.launch(FLT, d, x, np.float32(0.1), -0.0, 6)
    if PART:
        return [out, d]
    y16 = rt.buffer(6, "uint16")
    rt.launch(U16, y16, rt.upload(np.arange(250, 256, dtype=np.uint8)), 6)
    nans = rt.buffer(6, "bool")
    rt.launch(NANS, nans, d, 6)
    return [out, d, y16, nans]
'''

DEFINES = r'''
SRC = """
void poly(double *y, const double *x, int n) {
    for (int i = 0; i < n; i++) {
        double v = x[i] * SCALE + OFFSET;
#if USE_SQUARE
        v = v * v;
#endif
#ifdef NEGATE
        v = -v;
#endif
        y[i] = v + (double)(sizeof(TYPE)) + COUNT;
    }
}"""
VARIANTS = [Kernel(SRC, "poly", "PPi", defines={"SCALE": scale, "OFFSET": "(1.0/3.0)",
                   "USE_SQUARE": square, "TYPE": "long double", "COUNT": np.int64(-7)})
            for scale in (1e-300, np.float32(0.1), 3)
            for square in (True, False, np.bool_(True))]
VARIANTS.append(Kernel(SRC, "poly", "PPi", defines=[("SCALE", 1), ("OFFSET", 0),
                ("USE_SQUARE", 0), ("NEGATE", ""), ("TYPE", "char"), ("COUNT", 0)]))
VARIANTS += [Kernel(SRC, "poly", "PPi", options=options, defines={"SCALE": 2, "OFFSET": 1,
                    "USE_SQUARE": 1, "TYPE": "int", "COUNT": 1})
             for options in (("-O0",), ("-O3", "-funroll-loops"), ("-O1", "-DEXTRA=1"),
                             ("-fno-fast-math",), ["-O2", "-g"])]

def workload(rt):
    x = rt.upload(np.linspace(-3, 3, 17))
    outs = []
    for i, kernel in enumerate(VARIANTS):
        if not (PART and i % 2):
            outs.append(rt.buffer(17, "float64"))
            rt.launch(kernel, outs[-1], x, 17)
    return outs
'''

TUNE_GRID = r'''
SRC = """
void dot_rows(const int *A, const int *x, long long *y, int M, int N) {
    for (int i0 = 0; i0 < M; i0 += BLOCK)
        for (int i = i0; i < i0 + BLOCK && i < M; i++) {
            long long acc = 0;
            int j = 0;
            for (; j + UNROLL <= N; j += UNROLL)
                for (int u = 0; u < UNROLL; u++) acc += (long long)A[i * N + j + u] * x[j + u];
            for (; j < N; j++) acc += (long long)A[i * N + j] * x[j];
            y[i] = acc * SIGN * SIGN;
        }
}"""
CANDIDATES = {f"b{b}_u{u}_{s}": Kernel(SRC, "dot_rows", "PPPii", name=f"dot b{b} u{u}",
                                       defines={"BLOCK": b, "UNROLL": u, "SIGN": s})
              for b in (1, 16) for u in (1, 8) for s in (1, -1)}

def launch(rt, kernel, A, x, y, m, n, *, stream=None):
    rt.launch(kernel, A, x, y, m, n, stream=stream)

DOT = Tunable("dot_rows", CANDIDATES, launch, check="b1_u1_1", restore=("y",), warmup=0,
              repeats=2)

def workload(rt):
    rng = np.random.default_rng(7)
    outs = []
    for m, n in [(3, 5), (33, 7), (1, 100)][: 1 if PART else 3]:
        A = rt.upload(rng.integers(-1000, 1000, (m, n), dtype=np.int32))
        x = rt.upload(rng.integers(-1000, 1000, n, dtype=np.int32))
        outs.append(rt.buffer(m, "int64"))
        rt.tune(DOT, A, x, outs[-1], m, n)
    return outs
'''

TUNE_FLAKY = r"""
GOOD = ("void acc(float *y, const float *x, int n) "
        "{ for (int i = 0; i < n; i++) y[i] += x[i] * 2.0f; }")
VEC4 = ("void acc(float *y, const float *x, int n) { for (int i = 0; i + 4 <= n; i += 4) "
        "for (int u = 0; u < 4; u++) y[i+u] += x[i+u] * 2.0f; }")  # no tail when n % 4
CANDIDATES = {
    "good": Kernel(GOOD, "acc", "PPi"),
    "vec4": Kernel(VEC4, "acc", "PPi"),
    "broken": Kernel("void acc(float *y, const float *x, int n) { this is not C; }", "acc", "PPi"),
    "wrongsig": Kernel("void acc(float *y, const float *x, long n) { }", "acc", "PPi"),
    "picky": Kernel(GOOD + " /* picky */", "acc", "PPi"),
}

def launch(rt, kernel, y, x, n, *, stream=None):
    if kernel is CANDIDATES["picky"] and n % 3 == 0:
        raise RuntimeError("picky: n must not be a multiple of 3")
    rt.launch(kernel, y, x, n, stream=stream)

ACC = Tunable("acc", CANDIDATES, launch, check="good")

def workload(rt):
    outs = []
    for n in (8,) if PART else (8, 9, 12, 7):
        x = rt.upload(np.arange(n, dtype=np.float32) + 0.25)
        outs.append(rt.upload(np.full(n, 1.5, dtype=np.float32)))
        rt.tune(ACC, outs[-1], x, n)  # in place: y += 2x, once, whatever was measured
    return outs
"""

THREADS = r"""
import threading
from concurrent.futures import ThreadPoolExecutor

SRC = "void fill(int *y, int n) { for (int i = 0; i < n; i++) y[i] = i * ID + ID; }"
KERNELS = [Kernel(SRC, "fill", "Pi", defines={"ID": i}) for i in range(8)]

def launch(rt, kernel, y, n, *, stream=None):
    rt.launch(kernel, y, n, stream=stream)

TUNES = [Tunable(f"fill{t}", {f"c{i}": Kernel(SRC + f"/* c{i} */", "fill", "Pi",
                                              defines={"ID": t}) for i in range(2)},
                 launch, warmup=0, repeats=1) for t in range(2)]

def job(rt, i, outs):
    stream = rt.stream()
    y, z = rt.buffer(32, "int32"), rt.buffer(16, "int32")
    rt.launch(KERNELS[i], y, 32, stream=stream)
    rt.tune(TUNES[i % 2], z, 16, stream=stream)
    stream.synchronize()
    outs[i] = (y, z)

def workload(rt):
    outs, pool_outs = {}, {}
    count = 4 if PART else 8
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: job(rt, i, pool_outs), range(count)))
    threads = [threading.Thread(target=job, args=(rt, i, outs)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [b for got in (pool_outs, outs) for i in sorted(got) for b in got[i]]
"""

FILES = r"""
from pathlib import Path
HERE = Path(__file__).resolve().parent
BODY = (HERE / "body.c").read_text()
SCALE = Kernel(BODY, "scale", "PPi", options=("-I", str(HERE / "inc")))
NESTED = Kernel(BODY.replace("coef.h", "inc/coef.h"), "scale", "PPi", options=(f"-I{HERE}",))

def workload(rt):
    data = np.load(HERE / "data.npy")
    x = rt.upload(data)
    outs = [rt.buffer(data.size, "int32")]
    rt.launch(SCALE, outs[0], x, data.size)
    if not PART:
        outs.append(rt.buffer(data.size, "int32"))
        rt.launch(NESTED, outs[1], x, data.size)
    return outs
"""

SAME_NAME = r"""
ENTRY = "void k(int *y, int n) { for (int i = 0; i < n; i++) y[i] = helper(i); }"
HELPERS = [
    "static int helper(int v) { return v + 1; }\n",
    "static int helper(int v) { return v * 7; }\n",
    "typedef int num;\nstruct acc { num s; };\nenum { LIMIT = 5 };\n"
    "static int helper(int v) { struct acc a = { v - LIMIT }; return a.s; }\n",
    "typedef long num;\nstruct acc { num s; };\nenum { LIMIT = 9 };\n"
    "static int helper(int v) { struct acc a = { v - LIMIT }; return (int)a.s * 2; }\n",
    "static int\nhelper (int v)\n{ return v - 100; }\n",
    "  static int helper(int v) { return v ^ 3; }\n",
    "#define TWICE(x) ((x) * 2)\nstatic int helper(int v) { return TWICE(v); }\n",
    "#ifndef TWICE\n#define TWICE(x) ((x) * 20)\n#endif\n"
    "static int helper(int v) { return TWICE(v); }\n",
]
ONE = HELPERS[0]
KERNELS = [Kernel(h + ENTRY, "k", "Pi", name="k") for h in HELPERS] + [
    Kernel(ONE + "  " + ENTRY + "\n\n", "k", "Pi"),  # whitespace only
    Kernel("/* v2 */\n" + ONE + ENTRY + " // done", "k", "Pi"),  # comments only
    Kernel(ONE.replace(" ", "\t") + ENTRY, "k", "Pi"),
]

def workload(rt):
    outs = []
    for i, kernel in enumerate(KERNELS):
        if not (PART and i % 3 == 0):
            outs.append(rt.buffer(6, "int32"))
            rt.launch(kernel, outs[-1], 6)
    return outs
"""

LARGE = r"""
N = 20000
TABLE = "static const int table[%d] = {%s};\n" % (
    N, ",".join(str((i * 2654435761) % 1000003) for i in range(N)))
HELPERS = "".join(f"static int h{i}(int v) {{ return v + {i}; }}\n" for i in range(600))
CALLS = " + ".join(f"h{i}(x)" for i in range(0, 600, 7))
BIG = Kernel(TABLE + HELPERS + "/* " + "é" * 100000 + " */\n"
             f"void big(long long *y, int n) {{ for (int i = 0; i < n; i++) {{ int x = i; "
             f"y[i] = table[(i * 7919) % {N}] + ({CALLS}); }} }}", "big", "Pi")
SMALL = Kernel(HELPERS + "void small(long long *y, int n) "
               "{ for (int i = 0; i < n; i++) y[i] = h3(i) * h599(i); }", "small", "Pi")

def workload(rt):
    outs = [rt.buffer(64, "int64")]
    rt.launch(SMALL, outs[0], 64)
    if not PART:
        outs.append(rt.buffer(64, "int64"))
        rt.launch(BIG, outs[1], 64)
    return outs
"""

UNICODE = r"""
SRC = ("/* ∑ résumé 🚀 */ void cnt(int *y, int n) { const char *s = WORD; int c = 0; "
       "while (s[c]) c++; for (int i = 0; i < n; i++) y[i] = c + i * M; }")
K1 = Kernel(SRC, "cnt", "Pi", defines={"WORD": '"héllo→🚀"', "M": 1}, name="zählen 🚀")
K2 = Kernel(SRC, "cnt", "Pi", defines={"WORD": '"\\u00e9"', "M": 2}, name="\u202eevil\x1b[31m")

def launch(rt, kernel, y, n, *, stream=None):
    rt.launch(kernel, y, n, stream=stream)

TUNE = Tunable("σ-tune ✓", {"α": Kernel(SRC, "cnt", "Pi", defines={"WORD": '"a"', "M": 3}),
                            "β": Kernel(SRC, "cnt", "Pi", defines={"WORD": '"a"', "M": 3},
                                        options=("-O1",))},
               launch, key=lambda y, n: f"ключ {n}")

def workload(rt):
    outs = [rt.buffer(4, "int32")]
    rt.launch(K1, outs[0], 4)
    if not PART:
        outs += [rt.buffer(4, "int32"), rt.buffer(4, "int32")]
        rt.launch(K2, outs[1], 4)
        rt.tune(TUNE, outs[2], 4)
    return outs
"""

TUNE_MORE = r"""
SRC = ("void twice(int *y, const int *x, int n) { for (int i = 0; i < n; i += STEP) "
       "for (int j = i; j < i + STEP && j < n; j++) y[j] += 2 * x[j]; }")
FIN = Kernel("void fin(int *y, int n) { for (int i = 0; i < n; i++) y[i] = y[i] * 10 + 1; }",
             "fin", "Pi")
FIN2 = Kernel("void fin2(int *y, int n) { for (int i = 0; i < n; i++) y[i] -= 3; }", "fin2", "Pi")

class Box:
    def __init__(self, buf):
        self.buf = buf

def launch(rt, kernel, y, x, n, box, *, stream=None):
    rt.launch(kernel, y, x, n, stream=stream)
    rt.launch(FIN, y, n, stream=stream)
    rt.launch(FIN2, box.buf, n, stream=stream)  # a buffer inside an object: kept too

TWICE = Tunable("twice", {f"s{s}": Kernel(SRC, "twice", "PPi", defines={"STEP": s})
                          for s in (1, 2, 4)}, launch, key=lambda y, x, n, box: n, check="s1")

def workload(rt):
    outs = []
    for n in (5,) if PART else (5, 8):
        y = rt.upload(np.arange(n, dtype=np.int32))
        box = Box(rt.upload(np.full(n, 100, dtype=np.int32)))
        rt.tune(TWICE, y, y, n, box)  # one buffer passed twice, read and written
        outs += [y, box.buf]
    return outs
"""


def _files_beside(folder: Path) -> None:
    """What FILES reads: a kernel's body, a header in an include folder, an input array."""
    import numpy as np

    (folder / "inc").mkdir()
    (folder / "inc" / "coef.h").write_text(
        "#pragma once\n#define COEF 3\nstatic inline int twice(int v) { return 2 * v; }\n"
    )
    (folder / "body.c").write_text(
        '#include "coef.h"\nvoid scale(int *y, const int *x, int n) '
        "{ for (int i = 0; i < n; i++) y[i] = twice(x[i]) * COEF; }\n"
    )
    np.save(folder / "data.npy", np.arange(-5, 20, dtype=np.int32))


@pytest.fixture(scope="module")
def producing() -> Iterator[ForkedPython]:
    """The module's production processes, each a fork of one that imported numpy and
    warmcli (`tests/forked_python.py`): what each serves is tested, not how it starts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    server = ForkedPython(dict(env, COLUMNS="200"), ROOT)  # (conftest's `warm`'s, its home aside)
    yield server
    server.close()


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


def _serve(producing: ForkedPython, warm: Warm, workload: Path, bundle: Path | str) -> dict:
    """The workload served by a production process of its own (a fork of `producing`'s
    server) in `warm`'s environment, over `bundle` ("" for none)."""
    env = dict(warm.env, WARM_BUNDLE=str(bundle))
    proc = producing.run(SERVE, str(workload), env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def _warmed(warm: Warm, workload: Path, bundle: Path, *more: str, **env: str) -> None:
    """`warm run` of `workload` into `bundle` with `env` added, forked as this module's
    `warm` is: its workload reads `TRIAL_PART` from the environment a started run has."""
    saved = warm.env
    warm.env = dict(saved, **env)
    try:
        proc = warm("run", workload, "-b", bundle, "-q", *more, timeout=120)
    finally:
        warm.env = saved
    assert proc.returncode == 0, proc.stderr + proc.stdout
    if not more:
        assert "verify: compiled 0 kernels, measured 0 tunes: the bundle is complete" in proc.stdout


WORKLOADS = {
    "dtypes": DTYPES,
    "defines": DEFINES,
    "tune_grid": TUNE_GRID,
    "tune_flaky": TUNE_FLAKY,
    "threads": THREADS,
    "files": FILES,
    "same_name": SAME_NAME,
    "large": LARGE,
    "unicode": UNICODE,
    "tune_more": TUNE_MORE,
}


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_cold_miss_and_hit_compute_the_same(
    warm: Warm, tmp_path: Path, name: str, producing: ForkedPython
) -> None:
    workload = tmp_path / f"{name}.py"
    workload.write_text(HEAD + WORKLOADS[name])
    if name == "files":
        _files_beside(tmp_path)
    cold = _serve(producing, warm, workload, "")
    assert cold["kernels"] > 0

    _warmed(warm, workload, tmp_path / "full.warm")
    hot = _serve(producing, warm, workload, tmp_path / "full.warm")
    assert (hot["kernels"], hot["tunes"]) == (0, 0)
    assert hot["out"] == cold["out"]

    _warmed(warm, workload, tmp_path / "part.warm", "--no-verify", TRIAL_PART="1")
    miss = _serve(producing, warm, workload, tmp_path / "part.warm")
    assert miss["kernels"] + miss["tunes"] > 0
    assert miss["out"] == cold["out"]


ARGV = r"""
import argparse, json, sys
from pathlib import Path
from warmcli import Kernel
DEVICE = "host"
SEEN = Path(__file__).with_suffix(".argv")
SEEN.write_text(json.dumps(sys.argv))  # at import
K = Kernel("void k(int *y, int n) { for (int i = 0; i < n; i++) y[i] = i * S; }", "k", "Pi",
           defines={"S": 2})

def workload(rt):
    parser = argparse.ArgumentParser()
    parser.add_argument("--triple", action="store_true")
    parser.parse_args()  # as under `python workload.py`: no arguments
    with SEEN.open("a") as fh:
        fh.write("\n" + json.dumps(sys.argv))
    rt.launch(K, rt.buffer(4, "int32"), 4)
"""


def test_a_workload_sees_its_own_path_as_its_command_line(warm: Warm, tmp_path: Path) -> None:
    """`python w.py` gives the workload `sys.argv == ["w.py"]`; under `warm run` it saw
    warm's own (`run w.py -b ... -q`), so `argparse` in the workload exited 2."""
    workload = tmp_path / "w.py"
    workload.write_text(ARGV)
    proc = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert proc.returncode == 0, proc.stderr
    seen = [json.loads(line) for line in workload.with_suffix(".argv").read_text().splitlines()]
    assert seen == [[str(workload)]] * 4  # the import, then each of the three passes
    proc = warm("verify", tmp_path / "b.warm", "--workload", workload)
    assert proc.returncode == 0, proc.stderr + proc.stdout


WRONG_LETTERS = r"""
from warmcli import Kernel, Tunable
DEVICE = "host"
GOOD = Kernel("void acc(float *y, int n) { }", "acc", "Pi")
WRONG = Kernel("void acc(float *y, long n) { }", "acc", "Pi")

def launch(rt, kernel, y, n, *, stream=None):
    rt.launch(kernel, y, n, stream=stream)

CANDIDATES = {"good": GOOD, "wrong": WRONG} if BOTH else {"wrong": WRONG, "w2": WRONG}
ACC = Tunable("acc", CANDIDATES, launch)

def workload(rt):
    rt.tune(ACC, rt.buffer(4), 4)
"""
EXPLAINED = "parameter letters 'Pi' do not match acc(float *y, long n)"


def test_a_candidate_with_wrong_letters_is_shown_with_warms_explanation(
    warm: Warm, tmp_path: Path
) -> None:
    """README: a letters mismatch fails the kernel's compile, a tune's candidate excluded
    with it as its reason, both sides shown; stats, the run's note and a failed tune's
    message showed the probe's `static assertion failed: "warm-signature:2:..."`."""
    workload = tmp_path / "w.py"
    workload.write_text("BOTH = True\n" + WRONG_LETTERS)
    proc = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert proc.returncode == 0, proc.stderr
    assert f"failed: kernel acc: {EXPLAINED}" in proc.stdout, proc.stdout  # its note
    assert "static assertion" not in proc.stdout
    shown = warm("stats", tmp_path / "b.warm", "--explain", "acc").stdout
    assert f"failed: kernel acc: {EXPLAINED}" in shown and "static assertion" not in shown

    workload.write_text("BOTH = False\n" + WRONG_LETTERS)
    proc = warm("run", workload, "-b", tmp_path / "c.warm", "-q")
    assert proc.returncode == 2
    assert f"- wrong: kernel acc: {EXPLAINED}" in proc.stderr, proc.stderr


UNDEFINED = r"""
from warmcli import Kernel, Tunable
DEVICE = "host"
GOOD = Kernel("void f(int *y, int n) { y[0] = n; }", "f", "Pi")
UNDEFINED = Kernel("void f(int *y, int n) { y[0] = n; needs_feature_x(); }", "f", "Pi")

def launch(rt, kernel, y, n, *, stream=None):
    rt.launch(kernel, y, n, stream=stream)

F = Tunable("f", {"good": GOOD, "undefined": UNDEFINED}, launch)

def workload(rt):
    rt.tune(F, rt.buffer(4, "int32"), 4)
"""


def test_a_link_error_is_shown_not_the_warning_before_it(warm: Warm, tmp_path: Path) -> None:
    """A kernel calling a function nothing defines fails at link (`-z defs`): its log has
    gcc's warning (implicit declaration, with a file:line), then ld's lines, no file:line
    error; the note and `warm stats` showed the warning as the candidate's reason."""
    workload = tmp_path / "w.py"
    workload.write_text(UNDEFINED)
    proc = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert proc.returncode == 0, proc.stderr
    (note,) = {line for line in proc.stdout.splitlines() if "note: compile of f" in line}
    assert "undefined reference to `needs_feature_x'" in note, note
    shown = warm("stats", tmp_path / "b.warm", "--explain", "f").stdout
    (row,) = [line for line in shown.splitlines() if line.lstrip().startswith("undefined")]
    assert "failed: " in row and "undefined reference to `needs_feature_x'" in row, row
    assert "warning" not in row


FALLBACK = r"""
from warmcli import Kernel, KernelCompileError
DEVICE = "host"
FAST = Kernel("void f(int *y, int n) { for (int i = 0; i < n; i++) y[i] = i; needs_x(); }",
              "f", "Pi", name="fast")
SAFE = Kernel("void f(int *y, int n) { for (int i = 0; i < n; i++) y[i] = i; }", "f", "Pi",
              name="safe")

def workload(rt):
    y = rt.buffer(4, "int32")
    try:
        rt.launch(FAST, y, 4)
    except KernelCompileError:  # the fast kernel does not build here: the safe one
        rt.launch(SAFE, y, 4)
    return [y]
"""
REPORT = """
import runpy, sys
import warmcli
runpy.run_path(sys.argv[1])["workload"](warmcli.runtime("host"))
print(warmcli.report())
"""


def test_a_compile_that_failed_in_production_is_in_its_report(
    warm: Warm, tmp_path: Path, producing: ForkedPython
) -> None:
    """A workload that falls back when a kernel fails to compile: `warm run` exits 1 (its
    verify pass failed to compile it, so the bundle cannot be complete); a production
    process over that bundle runs the compiler for it at every start, and its report said
    `served everything: compiled 0 kernels`."""
    workload = tmp_path / "w.py"
    workload.write_text(FALLBACK)
    bundle = tmp_path / "b.warm"
    proc = warm("run", workload, "-b", bundle, "-q")
    assert proc.returncode == 1
    assert "verify: host: 1 kernel(s) failed to compile, not in the bundle" in proc.stdout
    assert (
        _serve(producing, warm, workload, "")["out"]
        == _serve(producing, warm, workload, bundle)["out"]
    )
    env = dict(warm.env, WARM_BUNDLE=str(bundle))
    served = producing.run(REPORT, str(workload), env=env, cwd=ROOT, timeout=120)
    assert served.returncode == 0, served.stderr
    assert "served everything" not in served.stdout, served.stdout
    assert "lacked 1 kernel(s) and 0 tune(s)" in served.stdout
    assert "kernel fast (failed to compile: nothing stored) on host" in served.stdout


BROKEN = r'''
from warmcli import Kernel
DEVICE = "host"
OK = [Kernel("void ok(int *y, int n) { y[0] = N; }", "ok", "Pi", defines={"N": i})
      for i in range(3)]
BAD = Kernel("""static int helper(int v) { return v; }
void bad(int *y, int n) {
    y[0] = helper(n) + undefined_name;
}""", "bad", "Pi", defines={"X": 1})

def workload(rt):
    y = rt.buffer(4, "int32")
    for kernel in OK:
        rt.launch(kernel, y, 4)
    rt.launch(BAD, y, 4)
'''


def test_a_compile_error_names_the_users_function_not_warms_symbol(
    warm: Warm, tmp_path: Path
) -> None:
    """A kernel that fails to compile beside others: exit 2, one line naming the kernel,
    then the compiler's log at the kernel's own file and line; the log named the entry by
    the symbol warm renames it to in a shared unit (`In function 'warm_50cada8a..._bad'`)."""
    workload = tmp_path / "w.py"
    workload.write_text(BROKEN)
    proc = warm("run", workload, "-b", tmp_path / "b.warm", "--json")
    assert proc.returncode == 2
    failed = json.loads(proc.stdout)
    error = failed["error"]  # what the run stored before it is kept, said before the log
    assert "KernelCompileError: kernel bad[X=1] failed to compile; " in error, error
    assert error.endswith(" before it are kept:"), error
    detail = failed["detail"]
    assert "bad.c:3:24: error: " in detail and "undefined_name" in detail, detail
    (function,) = [line for line in detail.splitlines() if "In function" in line]
    assert "bad" in function and "warm_" not in detail, detail


STOPS_EARLY = r"""
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void k(int *y, int n) { y[0] = n; }", "k", "Pi", options=(OPTION,))

def workload(rt):
    rt.launch(K, rt.buffer(2, "int32"), 7)
"""


@pytest.mark.parametrize("option", ["-fsyntax-only", "-c", "-E"])
def test_an_option_that_stops_cc_before_linking_fails_that_kernel(
    warm: Warm, tmp_path: Path, option: str
) -> None:
    """A kernel whose options stop cc before it links (`-c`, `-E`, `-fsyntax-only`): it
    blamed WARM_CC (`exited 0 but wrote no shared library: WARM_CC must name a C
    compiler`) or failed at load (`DeviceError: cannot load host kernel binary:
    /tmp/warm-host-.../<sha>.so: invalid ELF header`), naming neither kernel nor option."""
    workload = tmp_path / "w.py"
    workload.write_text(f"OPTION = {option!r}\n" + STOPS_EARLY)
    proc = warm("run", workload, "-b", tmp_path / "b.warm", "--json")
    assert proc.returncode == 2
    failed = json.loads(proc.stdout)
    assert failed["error"].endswith("KernelCompileError: kernel k failed to compile:"), failed
    assert f"with the kernel's options ({option})" in failed["detail"], failed
    assert "WARM_CC" not in failed["detail"] and not (tmp_path / "b.warm").exists()


LEAK = r"""
import numpy as np
from warmcli import Kernel
DEVICE = "host"
A = Kernel("typedef int myint;\nenum sz { SIZE = 4 };\nstruct pair { int x, y; };\n"
           "void a(int *y, int n) { for (int i = 0; i < n; i++) y[i] = SIZE; }", "a", "Pi")
B = Kernel("void b(int *y, int n) { " + USE + " for (int i = 0; i < n; i++) y[i] = s; }",
           "b", "Pi")

def workload(rt):
    outs = [rt.buffer(4, "int32"), rt.buffer(4, "int32")]
    rt.launch(A, outs[0], 4)
    rt.launch(B, outs[1], 4)
    return outs
"""


@pytest.mark.parametrize(
    "use", ["myint s = 2;", "int s = SIZE;", "struct pair p = {1, 2}; int s = p.y;"]
)
def test_a_kernel_never_sees_a_neighbours_types(
    warm: Warm, tmp_path: Path, use: str, producing: ForkedPython
) -> None:
    """Kernel b uses a typedef, an enumerator or a struct tag that only kernel a declares:
    alone (a cold start, or a miss) it does not compile, but batched after a in one unit it
    did, was stored, and a production process served it: a hit ran what a cold start
    refuses."""
    workload = tmp_path / "w.py"
    workload.write_text(f"USE = {use!r}\n" + LEAK)
    with pytest.raises(AssertionError, match="kernel b failed to compile"):
        _serve(producing, warm, workload, "")
    proc = warm("run", workload, "-b", tmp_path / "b.warm", "-q", "--jobs", "1")
    assert proc.returncode == 2, proc.stdout
    assert "KernelCompileError: kernel b failed to compile" in proc.stderr.splitlines()[0]


INDENTED = r"""
from warmcli import Kernel
DEVICE = "host"
A = Kernel("  static int helper(int v) { return v * 5; }\n"
           "void a(int *y, int n) { for (int i = 0; i < n; i++) y[i] = helper(i); }", "a", "Pi")
C = Kernel("void c(int *y, int n) { for (int i = 0; i < n; i++) y[i] = helper(i) + 2; }", "c",
           "Pi")

def workload(rt):
    for kernel in (A, C):
        rt.launch(kernel, rt.buffer(4, "int32"), 4)
"""


def test_a_kernel_never_calls_a_neighbours_indented_helper(warm: Warm, tmp_path: Path) -> None:
    """Kernel c calls `helper`, which it does not define: alone it does not link; batched
    after kernel a, whose helper is indented (not renamed: warm reads column 0), it called
    a's and was stored."""
    workload = tmp_path / "w.py"
    workload.write_text(INDENTED)
    proc = warm("run", workload, "-b", tmp_path / "b.warm", "-q", "--jobs", "1")
    assert proc.returncode == 2, proc.stdout
    assert "KernelCompileError: kernel c failed to compile" in proc.stderr.splitlines()[0]
    assert "undefined reference to `helper'" in proc.stderr
