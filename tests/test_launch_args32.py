"""Wrong launch and tune arguments are refused in one line before anything is compiled.

Real `warm run` in a subprocess, real production processes (`warmcli.runtime("host")`,
`WARM_BUNDLE`, `WARM_STRICT=1`) in a subprocess, real cc: a launch whose arguments no letter
takes is the same one-line `LaunchError` on every path (queued, discarded, executed; served
strict or not) and compiles, looks up and misses nothing; a numpy bool is an integer letter's
1 or 0 as Python's is; a tune input past Python's 4,300 int digits is keyed; a bool is no
buffer shape.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import Kernel, Runtime
from warmcli.backends.host import HostDevice


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


# Kernels and a tunable, shared by every workload and production script here.
HEAD = """
import json, threading
import numpy as np
import warmcli
from warmcli import Kernel, LaunchError, Tunable
DEVICE = "host"
ONE = Kernel("void one(float *x) { x[0] = 7; }", "one", "P")
PUT = Kernel("void put(float *x, int n) { x[0] = n; }", "put", "Pi")
OTHER = Kernel("void other(float *x) { x[1] = 5; }", "other", "P")
def launch_t(rt, k, y, n, *, stream=None):
    rt.launch(k, y, n.bit_length() % 1000, stream=stream)
def cand(i):
    return Kernel("void t(float *y, int n) { y[0] = n + U - U; }", "t", "Pi", defines={"U": i})
T = Tunable(name="t", candidates={f"c{i}": cand(i) for i in range(2)}, launch=launch_t)
"""
COUNT = "kernel one takes 1 argument(s) ('P'), got 2"
VALUE = "kernel put: argument 2 ('i', int32) must be an integer in [-2147483648, 2147483647], got"
# Each wrong launch and the start of its one line.
WRONG = {
    "rt.launch(ONE, x, 3)": COUNT,
    "rt.launch(PUT, x, 'a')": VALUE + " 'a' (str)",
    "rt.launch(PUT, x, 2**40)": VALUE + " 1099511627776 (int)",
    "rt.launch(PUT, 1.5, 2)": "kernel put: argument 1 ('P', pointer: a buffer) must be a buffer "
    "on host, got 1.5 (float)",
    "rt.launch(PUT, x, 2**20000)": VALUE + " 0x1000000000",  # past repr's 4,300 digits
}
# Runs each wrong launch under each process mode (production's Execute last), then prints
# what each raised and what the process compiled, queued or missed.
PROBE = (
    HEAD
    + """
from warmcli import ProcessMode, ProcessModeOverride
rt = warmcli.runtime("host")
x = rt.upload(np.zeros(3, np.float32))
seen = []
for mode in ("COMPILE_ONLY", "COMPILE_AND_AUTOTUNE", None):
    for call in json.loads(__import__("sys").argv[1]):
        try:
            if mode is None:
                exec(call)
            else:
                with ProcessModeOverride(ProcessMode[mode]):
                    exec(call)
            seen.append("no error")
        except Exception as exc:
            seen.append(f"{type(exc).__name__}: {exc}")
print(json.dumps({"seen": seen, "misses": len(warmcli.report().misses),
                  "missed": rt.kernels.missed(), "queued": len(rt.kernels._queue)}))
"""
)


def _production(warm: Warm, code: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=dict(warm.env, **env),
        timeout=300,
        cwd=ROOT,
    )


def _expected(message: str) -> str:
    return f"LaunchError: {message}"


def _check_probe(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    want = [_expected(m) for m in WRONG.values()] * 3
    assert len(out["seen"]) == len(want)
    for seen, expected in zip(out["seen"], want, strict=True):
        assert seen.startswith(expected), (seen, expected)
        assert "\n" not in seen and len(seen) < 200
    assert out["misses"] == 0 and out["missed"] == [] and out["queued"] == 0


def test_wrong_launches_compile_nothing_in_every_mode_of_a_production_process(
    warm: Warm,
) -> None:
    _check_probe(_production(warm, PROBE, json.dumps(list(WRONG))))


@pytest.fixture
def other_bundle(warm: Warm, workload_file, tmp_path: Path) -> Path:
    """A bundle warmed from a workload that launches only OTHER (it lacks ONE and PUT)."""
    path = workload_file(HEAD + "def workload(rt):\n    rt.launch(OTHER, rt.buffer(3))\n", "o.py")
    bundle = tmp_path / "other.warm"
    done = warm("run", path, "--bundle", bundle, "-q")
    assert done.returncode == 0, done.stderr
    return bundle


def test_a_strict_production_process_says_what_is_wrong_not_that_it_would_compile(
    warm: Warm, other_bundle: Path
) -> None:
    env = {"WARM_BUNDLE": str(other_bundle), "WARM_STRICT": "1"}
    _check_probe(_production(warm, PROBE, json.dumps(list(WRONG)), **env))
    # A right launch of a kernel the bundle lacks is still a strict miss.
    right = _production(warm, PROBE, json.dumps(["rt.launch(ONE, x)"]), **env)
    assert right.returncode == 0, right.stderr
    assert json.loads(right.stdout)["seen"][-1].startswith("StrictMissError: strict mode: would")


def test_a_wrong_launch_a_thread_survives_leaves_the_verify_pass_nothing_compiled(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    path = workload_file(
        HEAD
        + """
def workload(rt):
    x = rt.upload(np.zeros(3, np.float32))
    rt.launch(OTHER, x)
    caught = []
    def go():
        try:
            rt.launch(ONE, x, 3)
        except LaunchError as exc:
            caught.append(str(exc))
    t = threading.Thread(target=go)
    t.start()
    t.join()
    assert caught == ["kernel one takes 1 argument(s) ('P'), got 2"], caught
"""
    )
    proc = warm("run", path, "--bundle", bundle_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "not in the bundle" not in proc.stdout + proc.stderr
    assert "verify" in proc.stdout + proc.stderr


@pytest.mark.parametrize("call", list(WRONG))
def test_warm_run_stops_at_a_wrong_launch_in_one_line(
    warm: Warm, workload_file, bundle_path: Path, call: str
) -> None:
    path = workload_file(
        HEAD + f"def workload(rt):\n    x = rt.upload(np.zeros(3, np.float32))\n    {call}\n"
    )
    proc = warm("run", path, "--bundle", bundle_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    line = f"warm: error: workload raised during CompileOnly: {path}:"
    assert line in proc.stderr and _expected(WRONG[call]) in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not bundle_path.exists()


def test_a_loaded_kernels_launch_checks_nothing_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hot path: once a kernel is loaded (from its second launch on), the check made
    before a load is not called (the device's converter checks each executed launch)."""
    kernel_cache = importlib.import_module("warmcli.runtime.kernel_cache")

    rt = Runtime(HostDevice())
    try:
        put = Kernel("void put(float *x, int n) { x[0] = n; }", "put", "Pi")
        x = rt.upload(np.zeros(2, np.float32))
        rt.launch(put, x, 3)

        def refuse(*args: object) -> None:
            raise AssertionError("checked again on the hot path")

        monkeypatch.setattr(kernel_cache, "check_before_load", refuse)
        rt.launch(put, x, 4)
        assert rt.read(x).tolist() == [4.0, 0.0]
        with pytest.raises(Exception, match="kernel put takes 2 argument"):
            rt.launch(put, x)  # the device's own check
    finally:
        rt.close()


# -- a numpy bool is an integer letter's 1 or 0, as Python's is ----------------------------

BOOLS = (
    HEAD
    + """
def workload(rt):
    out = []
    for b in (np.True_, np.False_, True, False, np.bool_(1)):
        out.append(rt.upload(np.full(3, 9, np.float32)))
        rt.launch(PUT, out[-1], b)
    return out
"""
)
# Runs a workload file's `workload` on the host runtime, over WARM_BUNDLE, and prints what
# it returned (a buffer's first element, read back) and how many misses it had.
SERVE = """
import json, runpy, sys, warmcli
from warmcli.backends.base import Buffer
rt = warmcli.runtime("host")
got = runpy.run_path(sys.argv[1])["workload"](rt)
got = [float(rt.read(v)[0]) if isinstance(v, Buffer) else v for v in got]
print(json.dumps([got, len(warmcli.report().misses)]))
"""


def test_a_numpy_bool_passes_an_integer_letter_as_pythons_does(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    path = workload_file(BOOLS)
    proc = warm("run", path, "--bundle", bundle_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    served = _production(warm, SERVE, str(path), WARM_BUNDLE=str(bundle_path), WARM_STRICT="1")
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout) == [[1.0, 0.0, 1.0, 0.0, 1.0], 0]


# -- a tune input past Python's 4,300 int digits -------------------------------------------

TUNE_HUGE = (
    HEAD
    + """
def workload(rt):
    y = rt.upload(np.zeros(2, np.float32))
    return [rt.tune(T, y, 2**20000), y]
"""
)


def test_a_huge_int_tune_input_is_keyed_alike_in_warm_run_and_production(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    path = workload_file(TUNE_HUGE)
    proc = warm("run", path, "--bundle", bundle_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    for limit in ("4300", "640", "0"):  # the key does not depend on Python's digit limit
        served = _production(
            warm,
            SERVE,
            str(path),
            WARM_BUNDLE=str(bundle_path),
            WARM_STRICT="1",
            PYTHONINTMAXSTRDIGITS=limit,
        )
        assert served.returncode == 0, served.stderr
        (pick, y0), misses = json.loads(served.stdout)
        assert pick in ("c0", "c1") and y0 == 20001 % 1000 and misses == 0


def test_describe_input_of_ints_past_the_digit_limit() -> None:
    from warmcli.runtime.tune_spec import describe_input

    assert describe_input(12345) == "12345"
    assert describe_input(10**4300 - 1) == "9" * 4300
    assert describe_input(10**4300) == hex(10**4300)
    assert describe_input(-(2**20000)) == "-" + hex(2**20000)
    assert describe_input((2**20000, 3)) == f"({hex(2**20000)},3)"


# -- a bool is no buffer shape -------------------------------------------------------------


@pytest.mark.parametrize("shape", ["True", "(2, True)", "[False]"])
def test_a_bool_is_no_buffer_shape(
    warm: Warm, workload_file, bundle_path: Path, shape: str
) -> None:
    path = workload_file(HEAD + f"def workload(rt):\n    rt.buffer({shape})\n")
    proc = warm("run", path, "--bundle", bundle_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    message = f"ValueError: a buffer's shape takes integer sizes >= 0, not {shape}"
    assert message in proc.stderr and "Traceback" not in proc.stderr
    served = _production(
        warm,
        HEAD + f"rt = warmcli.runtime('host')\nrt.buffer({shape})\n",
    )
    assert served.returncode == 1 and message in served.stderr
    ok = _production(warm, HEAD + "print(warmcli.runtime('host').buffer((2, 1)).shape)\n")
    assert ok.returncode == 0 and ok.stdout.strip() == "(2, 1)"
