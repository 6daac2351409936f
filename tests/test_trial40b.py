"""An ML researcher adopting warm's own API from the README alone (trial40b).

- A notebook-style script (its GPU work at the top level, no `workload()`) is refused
  with `defines no function workload(runtime)`; warm saw its import use
  `warmcli.runtime()`, and now says where and what to do (as it says for a workload that
  has a `workload()` beside such top-level work), not only what is missing.
- A define of an int whose text passes Python's 4,300-digit limit was Python's own
  `ValueError` (`Exceeds the limit ...`) naming no kernel; the README says every bad
  define is a `ValueError` naming the kernel where it is made.
- What held: hundreds of variants (a dozen here) from a dict of numpy-valued configs, a
  tunable whose candidates include one that fails to compile and one that computes another
  answer, 0-sized tunes, a seeded RNG: cold, a hit and a miss give the same bytes.

Real parts throughout: the CLI in a subprocess, the system C compiler, SQLite bundles; the
scripts and production processes whose output is tested each a process of its own forked
from one that imported numpy and warmcli (`tests/forked_python.py`) where their environment
is the module's (`producing`), started afresh where it sets variables of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from forked_python import ForkedPython


@pytest.fixture(scope="module")
def producing() -> Iterator[ForkedPython]:
    """The module's scripts and production processes, each a fork of one process that
    imported numpy and warmcli: what they print is tested, not how they start. Its `base`
    is conftest's `warm`'s environment apart from its home (the scripts' own), as it is
    when the module's first test runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    server = ForkedPython(dict(env, COLUMNS="200"), ROOT)
    yield server
    server.close()


NOTEBOOK = """
import numpy as np
import warmcli
from warmcli import Kernel
K = Kernel("void twice(float *x, int n) { for (int i = 0; i < n; i++) x[i] *= 2; }",
           "twice", "Pi")
rt = warmcli.runtime()
x = rt.upload(np.arange(4, dtype=np.float32))
rt.launch(K, x, 4)
print(rt.read(x))
"""


def test_a_notebook_style_script_is_told_where_its_gpu_work_goes(
    warm: Warm, tmp_path: Path
) -> None:
    script = tmp_path / "nb.py"
    script.write_text(NOTEBOOK)
    done = warm("run", script, "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "defines no function workload(runtime)" in lines[0]
    assert f"{script}:8" in lines[0]  # where its import first used the runtime
    assert "def workload(rt)" in lines[0]
    assert not (tmp_path / "b.warm").exists()


def test_a_script_without_runtime_at_import_gets_no_such_hint(warm: Warm, tmp_path: Path) -> None:
    script = tmp_path / "w.py"
    script.write_text("x = 1\n")
    done = warm("run", script, "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 2
    assert done.stderr.strip() == f"warm: error: {script}: defines no function workload(runtime)"


def test_a_define_of_a_huge_int_is_refused_naming_the_kernel(producing: ForkedPython) -> None:
    code = (
        "from warmcli import Kernel\n"
        "try:\n"
        "    Kernel('void f(float *x) { }', 'f', 'P', defines={'BIG': 10 ** 5000})\n"
        "except ValueError as e:\n"
        "    print(e)\n"
    )
    done = producing.run(code, env=producing.base, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("kernel f: define BIG: "), done.stdout
    assert "4,300" in done.stdout


RESEARCH = """
import hashlib, os, sys
import numpy as np
import warmcli
from warmcli import Kernel, Tunable
DEVICE = "host"
VAR = '''
void var(const float *x, float *y, int n) {
    for (int i = 0; i < n; i++) y[i] = x[i] * MUL + ADD;
}'''
# 12 configs (the trial had hundreds, then 40): every (MUL, ADD's type, FLAG) pattern of
# i % 2 and i % 3 twice over, a dozen builds of one entry name apart only by their defines
N = int(os.environ.get("NCFG", "12"))
CONFIGS = {f"c{i}": {"MUL": np.float32(1 + i / 7), "ADD": np.float64(-0.0) if i % 2 else 1e-5 * i,
                     "FLAG": np.bool_(i % 3 == 0)} for i in range(N)}
VARIANTS = [Kernel(VAR, "var", "PPi", defines=cfg) for cfg in CONFIGS.values()]
SRC = '''
void axpy(float *y, const float *x, float a, int n) {
    for (int i = 0; i < n; i += STEP)
        for (int j = i; j < i + STEP && j < n; j++) y[j] += a * x[j] WRONG;
}'''
def launch(rt, k, y, x, a, n, *, stream=None):
    rt.launch(k, y, x, a, n, stream=stream)
TUNE = Tunable("axpy", {
    "s1": Kernel(SRC, "axpy", "PPfi", defines={"STEP": 1, "WRONG": ""}),
    "s4": Kernel(SRC, "axpy", "PPfi", defines={"STEP": 4, "WRONG": ""}),
    "bad": Kernel(SRC, "axpy", "PPfi", defines={"STEP": 2, "WRONG": "+ syntax error"}),
    "off": Kernel(SRC, "axpy", "PPfi", defines={"STEP": 8, "WRONG": "* 1.001f"}),
}, launch, check="s1")
OUT = []
def workload(rt):
    np.random.seed(7)
    rng = np.random.default_rng(1234)
    xb = rt.upload(rng.standard_normal(300).astype(np.float32))
    OUT.clear()
    for k in VARIANTS:
        y = rt.buffer(300)
        rt.launch(k, xb, y, 300)
        OUT.append(y)
    for n in (0, 1, 300):
        y = rt.upload(np.ones(max(n, 1), np.float32))
        rt.tune(TUNE, y, xb, 0.5, n)
        OUT.append(y)
    OUT.append(rt.upload(np.array([rng.standard_normal(), np.random.rand()])))
if __name__ == "__main__":
    rt = warmcli.runtime()
    workload(rt)
    h = hashlib.sha256()
    for b in OUT:
        h.update(rt.read(b).tobytes())
    print(h.hexdigest())
"""


def test_cold_hit_and_miss_give_the_same_bytes(
    warm: Warm, tmp_path: Path, producing: ForkedPython
) -> None:
    script = tmp_path / "research.py"
    script.write_text(RESEARCH)
    full, half = tmp_path / "full.warm", tmp_path / "half.warm"
    assert warm("run", script, "-b", full, "-q").returncode == 0
    env = dict(warm.env, NCFG="6")
    made = subprocess.run(
        [sys.executable, "-m", "warmcli", "run", str(script), "-b", str(half), "-q"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr

    def digest(bundle: str, strict: str = "0") -> tuple[str, str]:
        env = dict(warm.env, WARM_BUNDLE=bundle, WARM_STRICT=strict, WARM_REPORT="1")
        done = producing.run(script, env=env, cwd=ROOT, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip(), done.stderr

    cold, _ = digest("")
    hit, said = digest(str(full), strict="1")
    assert "served everything" in said
    miss, said = digest(str(half))
    assert "lacked 6 kernel(s) and 0 tune(s)" in said
    assert cold == hit == miss


@pytest.mark.parametrize("value", ["np.float32(0.1)", "np.float16(0.1)"])
def test_a_numpy_float_define_is_the_text_numpy_writes(value: str, producing: ForkedPython) -> None:
    """As the README now says: a float32 or float16 define is numpy's shortest text
    (`0.1`), which C reads as the double 0.1, not the float32 the value holds."""
    code = (
        "import numpy as np\n"
        "from warmcli import Kernel\n"
        f"k = Kernel('void f(float *x) {{ }}', 'f', 'P', defines={{'V': {value}}})\n"
        "print(k.define('V'))\n"
    )
    done = producing.run(code, env=producing.base, cwd=ROOT, timeout=60)
    assert done.stdout.strip() == "0.1", done.stderr


ZEROS = """
import numpy as np, warmcli
from warmcli import Kernel, Tunable
DEVICE = "host"
SRC = '''
void ax(float *y, const float *x, int n) {
    for (volatile int k = 0; k < SPIN; k++) ;
    for (int i = 0; i < n; i++) y[i] += 2.0f * x[i] * SCALE;
}'''
def launch(rt, k, y, x, n, *, stream=None):
    rt.launch(k, y, x, n, stream=stream)
T = Tunable("ax", {
    "ref": Kernel(SRC, "ax", "PPi", defines={"SPIN": 300000, "SCALE": "1.0f"}),
    "fast_wrong": Kernel(SRC, "ax", "PPi", defines={"SPIN": 0, "SCALE": "1.5f"}),
}, launch, check="ref")
def workload(rt, data=None):
    x = rt.upload(np.zeros(64, np.float32) if data is None else data)
    y = rt.buffer(64)
    rt.tune(T, y, x, 64)
    return y
if __name__ == "__main__":
    rt = warmcli.runtime()
    print(float(rt.read(workload(rt, np.ones(64, np.float32)))[0]))
"""


def test_a_check_judges_only_the_inputs_it_was_measured_on(
    warm: Warm, tmp_path: Path, producing: ForkedPython
) -> None:
    """Warmed on zeros, where every candidate agrees, the wrong one passes the check and
    is served for real data: the README now says so (it said only that a cold start, a
    tune miss and a hot start give the same numbers)."""
    script, bundle = tmp_path / "z.py", tmp_path / "z.warm"
    script.write_text(ZEROS)
    assert warm("run", script, "-b", bundle, "-q").returncode == 0

    def served(over: str) -> str:
        env = dict(warm.env, WARM_BUNDLE=over)
        done = producing.run(script, env=env, cwd=ROOT, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    assert (served(""), served(str(bundle))) == ("2.0", "3.0")
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "The check judges the inputs the tune is measured on" in readme
    assert "served `3.0` where cold computed `2.0`" in readme


ORDER = """
import os, sys, time, numpy as np, warmcli
from warmcli import Kernel, Tunable
DEVICE = "host"
SRC = '''
void total(const float *x, float *out, int n) {
    float s = 0.0f;
    if (FORWARD) for (int i = 0; i < n; i++) s += x[i];
    else for (int i = n - 1; i >= 0; i--) s += x[i];
    out[0] = s;
}'''
def launch(rt, k, x, out, n, *, stream=None):
    if os.environ.get("SLOW") == ("fwd" if k.define("FORWARD") == "1" else "rev"):
        time.sleep(0.002)  # this machine runs that candidate slower
    rt.launch(k, x, out, n, stream=stream)
TOLERANCE = tuple(map(float, os.environ["TOLERANCE"].split(",")))
T = Tunable("total", {"fwd": Kernel(SRC, "total", "PPi", defines={"FORWARD": 1}),
                      "rev": Kernel(SRC, "total", "PPi", defines={"FORWARD": 0})},
            launch, check="fwd", check_tolerance=TOLERANCE)
def workload(rt):
    x = rt.upload(np.random.default_rng(0).standard_normal(10000).astype(np.float32))
    out = rt.buffer(1)
    rt.tune(T, x, out, 10000)
    return out
if __name__ == "__main__":
    rt = warmcli.runtime()
    print(float(rt.read(workload(rt))[0]).hex())
"""


@pytest.mark.parametrize("tolerance", ["1e-4,1e-5", "0,0"])
def test_a_pick_that_rounds_otherwise_differs_in_the_low_bits_unless_checked_exactly(
    warm: Warm, tmp_path: Path, tolerance: str
) -> None:
    """Warmed where the forward sum is slower, the bundle picks the reverse one; a cold
    start where the reverse is slower picks the forward: both pass a check within 1e-4,
    and differ in the low bits. The README said a cold start and a hit give the same
    numbers; it now says so of the pick, and that `check_tolerance=(0, 0)` keeps them."""
    script, bundle = tmp_path / "order.py", tmp_path / "o.warm"
    script.write_text(ORDER)
    env = dict(warm.env, TOLERANCE=tolerance)
    made = subprocess.run(
        [sys.executable, "-m", "warmcli", "run", str(script), "-b", str(bundle), "-q"],
        capture_output=True,
        text=True,
        env=dict(env, SLOW="fwd"),
        cwd=ROOT,
        timeout=60,
    )
    assert made.returncode == 0, made.stderr

    def served(over: str) -> str:
        done = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            env=dict(env, SLOW="rev", WARM_BUNDLE=over),
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    cold, hit = served(""), served(str(bundle))
    assert (cold != hit) if tolerance != "0,0" else (cold == hit)
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "a cold start and a hit may differ in the low bits" in readme
    assert "check with `check_tolerance=(0, 0)`" in readme


def test_an_input_the_default_tune_key_cannot_read_names_the_tunable_and_input(
    producing: ForkedPython,
) -> None:
    """A researcher passing a config dict through a tune: the error said only `cannot
    derive a tune key from a dict; pass key=`, naming neither the tunable nor which input."""
    code = (
        "import numpy as np, warmcli\n"
        "from warmcli import Kernel, Tunable\n"
        "warmcli.use_bundle(None)\n"
        "rt = warmcli.runtime('host')\n"
        "K = Kernel('void f(float *x, float a) { x[0] = a; }', 'f', 'Pf')\n"
        "def launch(rt, k, x, cfg, *, stream=None):\n"
        "    rt.launch(k, x, cfg['a'], stream=stream)\n"
        "T = Tunable('scaled', {'a': K, 'b': K}, launch)\n"
        "for cfg in ({'a': 1.0}, (1, np.zeros(2))):\n"
        "    try:\n"
        "        rt.tune(T, rt.buffer(1), cfg)\n"
        "    except TypeError as e:\n"
        "        print(e)\n"
    )
    done = producing.run(code, env=producing.base, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    said = done.stdout.splitlines()
    assert said == [
        "tunable scaled: input 2 is a dict, which the default tune key cannot read "
        "(it reads buffers, numbers, str, None and tuples or lists of them): pass key=",
        "tunable scaled: input 2 holds a ndarray, which the default tune key cannot read "
        "(it reads buffers, numbers, str, None and tuples or lists of them): pass key=",
    ], done.stdout
