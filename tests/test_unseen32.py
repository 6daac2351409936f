"""A new user's own workloads (round 32): what a first-time user's programs meet.

Written from the README alone, through the real CLI in subprocesses and real cc on the host
backend: workloads of many dtypes (float16, float64, complex64, uint64, bool), zero-size,
one-element, Fortran-order and strided inputs, big and non-finite scalars, kernels built in
loops with f-strings and defines of every kind, tunables of many candidates with options,
generator and async workloads, `-m pkg.module` workloads with threads on their own
streams, workloads reading files beside them. For each, a cold start (no bundle), a miss
(a bundle warmed from part of it) and a hit (its own bundle, served strict) give the same
bytes, and the hit compiles and tunes nothing.

Bugs it found:
- an exception whose `__str__` itself raises (an app error class that looks its message
  up, `MESSAGES[self.code]`) broke warm's own formatting: raised by a workload, or at its
  import, `warm run` died with warm's traceback and exit 1; raised by a tune candidate's
  launch function, the candidate was not excluded, the whole run failed with the
  `__str__`'s `KeyError` instead. Such an exception now reads as Python shows it,
  `<exception str() failed>`, and is handled as any other.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from conftest import Warm

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
