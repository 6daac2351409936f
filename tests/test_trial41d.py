"""Autotuning as an ML researcher leans on it, trial 41d: the real CLI in a subprocess,
the host backend (real cc), real bundles.

- A `key=` value holding an int of more digits than Python's limit on an int's text
  (4,300 by default, `PYTHONINTMAXSTRDIGITS` or `sys.set_int_max_str_digits` lower or
  higher) keyed by that limit: a process whose limit was lower than the warming's raised
  `TuneSpecError` at a tune `warm run` had stored (a crash in production, where a cold
  start ran), one whose limit was higher keyed it in decimal where `warm run` refused it,
  and `warm run` refused a key= int past 10**4300 that an input of the same value keys in
  hex. A key= int keys as an input's does: its decimal digits below 10**4300 whatever the
  limit, in hex from it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

BIG_KEY = """\
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void f(float *y, int n) {{ for (int i = 0; i < n; i++) y[i] = y[i] * 2.0f + W; }}"


def launch(rt, kernel, y, n, *, stream=None):
    rt.launch(kernel, y, n, stream=stream)


T = Tunable("big", {{f"v{{i}}": Kernel(SRC, "f", "Pi", defines={{"W": i}}) for i in range(2)}},
            launch, key=lambda y, n: {{"n": n, "seed": 7 ** {power}, {dict_key}: 1}})


def workload(rt):
    y = rt.upload(np.arange(8, dtype=np.float32))
    rt.tune(T, y, 8)
"""
SERVE = """\
import json, runpy, sys
import warmcli
ns = runpy.run_path(sys.argv[1])
ns["workload"](warmcli.runtime("host"))
print(json.dumps({"tunes": len(warmcli.report().tunes)}))
"""


def serve(warm: Warm, script: Path, bundle: Path, digits: str) -> subprocess.CompletedProcess[str]:
    env = dict(warm.env, WARM_BUNDLE=str(bundle), PYTHONINTMAXSTRDIGITS=digits)
    return subprocess.run(
        [sys.executable, "-c", SERVE, str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=ROOT,
    )


# 7**1200 has 1,015 digits: over a limit of 640; 7**6000, 5,071: past 10**4300 (hex)
@pytest.mark.parametrize("power", [1200, 6000])
def test_a_key_int_keys_alike_whatever_the_process_limit_on_int_text(
    warm: Warm, workload_file, bundle_path: Path, power: int
) -> None:
    script = workload_file(BIG_KEY.format(power=power, dict_key=f"7 ** {power}"))
    proc = warm("run", script, "-b", bundle_path, "--quiet")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for digits in ("640", "0", "4300"):  # lower than the warming's, none, the default
        served = serve(warm, script, bundle_path, digits)
        assert served.returncode == 0, (digits, served.stderr[-2000:])
        assert json.loads(served.stdout) == {"tunes": 0}, (digits, served.stderr[-2000:])


def test_a_key_inside_itself_is_one_line_naming_the_tunable(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    """A key= value that holds itself is refused as JSON refuses it (this branch's first
    walk for big ints went on, once JSON refused it, to Python's recursion limit: a
    RecursionError, not the tunable's error)."""
    text = BIG_KEY.format(power=1, dict_key="1").replace(
        'key=lambda y, n: {"n": n, "seed": 7 ** 1, 1: 1}', "key=selfref"
    )
    text = text.replace(
        "T = Tunable(",
        "def selfref(y, n):\n    v = [n]\n    v.append(v)\n    return v\n\n\nT = Tunable(",
    )
    script = workload_file(text)
    proc = warm("run", script, "-b", bundle_path, "--quiet")
    assert proc.returncode == 2, proc.stderr[-2000:]
    [line] = proc.stderr.strip().splitlines()
    assert "TuneSpecError: tunable big: key= gave a value with no JSON text" in line, line
    assert "Circular reference detected" in line, line
