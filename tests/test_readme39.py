"""What running README.md's commands and claims as written found wrong (readme39).

Real parts only: the CLI in a subprocess, the system cc, real SQLite files.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# A tunable keyed by a dict whose key is a number: `key=` gives {n: "rows"}, with n a numpy
# int in the first tune and the Python int it holds in the second (README: "a numpy number
# in its value keys as the Python number it holds").
NUMPY_DICT_KEY = """
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
SRC = "void fill(float *x, int n) { for (int i = 0; i < n; i++) x[i] = 1; }"
def launch(rt, k, x, n, *, stream=None):
    rt.launch(k, x, n, stream=stream)
CANDIDATES = {"a": Kernel(SRC, "fill", "Pi"), "b": Kernel(SRC, "fill", "Pi", defines={"V": 2})}
T = Tunable("op", CANDIDATES, launch, key=lambda x, n: {n: "rows"})
def workload(rt):
    x = rt.buffer(4)
    rt.tune(T, x, np.int64(4))
    rt.tune(T, x, 4)
"""


def test_a_numpy_number_as_a_dict_key_in_a_key_value_keys_as_the_number_it_holds(
    warm: Warm, tmp_path: Path, workload_file: Callable[..., Path]
) -> None:
    """README: a numpy number in a `key=` value keys as the Python number it holds. One
    that is a dict's key was refused instead: `warm run` failed with `TuneSpecError:
    tunable op: key= gave a value with no JSON text: keys must be str, int, float, bool or
    None, not numpy.int64` (exit 2), where the same dict keyed by the int 4 was warmed."""
    bundle = tmp_path / "b.warm"
    done = warm("run", workload_file(NUMPY_DICT_KEY), "-b", bundle, "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "stored 2 new kernel(s) and 1 new tune(s)" in done.stdout
    stats = warm("stats", bundle, "--json")
    assert [t["shape"] for t in json.loads(stats.stdout)["tunes"]] == ['{"4": "rows"}']


EXIT_FUNCTIONS = """
import atexit
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void one(float *x) { x[0] = 1; }", "one", "P")
atexit.register(print, "registered at import")
def workload(rt):
    atexit.register(print, "registered by a pass")
    rt.launch(K, rt.buffer(1))
"""


def test_an_exit_function_runs_once_per_registration_as_the_readme_now_says(
    warm: Warm, tmp_path: Path, workload_file: Callable[..., Path]
) -> None:
    """README said the workload's exit functions "run once as the worker ends"; one that
    `workload()` registers is registered by each of the three passes and runs three times,
    as Python runs it once per registration. README now says so (register it at import to
    have it run once), and this pins it."""
    done = warm("run", workload_file(EXIT_FUNCTIONS), "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("registered at import") == 1
    assert done.stdout.count("registered by a pass") == 3
