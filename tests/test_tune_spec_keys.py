"""A tune's key holds what decides its pick, as text the same in every process.

Through the real CLI (`warm run`, `warm verify --workload`) and production processes with
and without the bundle (each a fork of one that imported the CLI, or numpy and warmcli, once,
whatever `CHECK`, `PLUS` or `BY_CFG` it sets, `tests/forked_tool_env.py`; fresh ones where
the hash seed is what is tested): a bundle warmed without an output check does not
serve a process that checks; a check callable keys alike in every process; a `key=`
value with a memory address in its text, or a set of no stable order, is refused where a
bundle could never serve it. Tunables without a check, and valid keys, key as before.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ROOT, SQUARES, TUNED_READ, Warm
from forked_cli import ForkedWarm
from forked_tool_env import ToolEnvPythons, ToolEnvServers

from warmcli import Kernel, ProcessMode, ProcessModeOverride, Runtime, Tunable
from warmcli.backends.host import HostDevice
from warmcli.errors import TuneSpecError

CHECKED = (
    SQUARES
    + """
import os

DEVICE = "host"


if os.environ.get("CHECK") == "strict":
    def squares(outputs, inputs):
        np.testing.assert_allclose(outputs[0], inputs[0] ** 2, rtol=1e-6)
else:
    def squares(outputs, inputs):
        np.testing.assert_allclose(outputs[0], inputs[0] ** 2, rtol=1e-6, atol=0.5)

CHECK = {"good": "good", "strict": squares, "loose": squares}.get(os.environ.get("CHECK", ""))
SQ = Tunable("sq", {"good": GOOD, "fast": FAST_WRONG}, launch, check=CHECK, restore=(1,))


def workload(rt):
    x = rt.upload(np.arange(1000, dtype=np.float32))
    y = rt.buffer(1000)
    rt.tune(SQ, x, y, 1000)
    return y
"""
)


OWN = ("CHECK", "PLUS", "BY_CFG")  # what a test's workload reads of its environment
_python = ToolEnvPythons(ROOT, *OWN)  # production processes' server
_servers = ToolEnvServers(ROOT, *OWN)  # the CLI's


@pytest.fixture(scope="module", autouse=True)
def _forking() -> Iterator[None]:
    """The module's forking servers, ended with it."""
    yield
    _python.close()
    _servers.close()


@pytest.fixture
def warm(warm: Warm) -> ForkedWarm:
    """conftest's `warm`, each command forked from `_servers`."""
    return ForkedWarm(warm, _servers)


def _with(warm: Any, **env: str) -> ForkedWarm:
    return ForkedWarm(Warm(dict(warm.env, **env)), _servers)


def _produce(warm: Any, code: str, *args: object, bundle: Path | None = None) -> Any:
    """`Warm.production`, forked from `_python`: `code` run with `args` in `warm`'s
    environment (over `bundle` through `WARM_BUNDLE`, if given); the JSON it prints."""
    env = dict(warm.env, **({"WARM_BUNDLE": str(bundle)} if bundle is not None else {}))
    proc = _python.run(code, *map(str, args), env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_bundle_warmed_without_the_check_does_not_serve_a_checked_tunable(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    path = workload_file(CHECKED)
    unchecked = tmp_path / "unchecked.warm"
    assert warm("run", path, "-b", unchecked, "-q").returncode == 0
    assert _produce(warm, TUNED_READ, path, 1, bundle=unchecked) == {"y": 1.5, "tunes": 0}
    good = _with(warm, CHECK="good")
    cold = _produce(good, TUNED_READ, path, 1)
    assert cold == {"y": 1.0, "tunes": 1}, "the check excludes the fast, wrong candidate"
    served = _produce(good, TUNED_READ, path, 1, bundle=unchecked)
    assert served == cold, "served the unchecked pick"
    proc = good("verify", unchecked, "--workload", path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "tune sq" in proc.stdout + proc.stderr
    checked = tmp_path / "checked.warm"
    assert good("run", path, "-b", checked, "-q").returncode == 0
    assert _produce(good, TUNED_READ, path, 1, bundle=checked) == {"y": 1.0, "tunes": 0}
    assert _produce(warm, TUNED_READ, path, 1, bundle=checked)["tunes"] == 1  # and the other way


def test_a_check_callable_keys_alike_in_every_process_and_apart_when_its_code_differs(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    path = workload_file(CHECKED)
    bundle = tmp_path / "strict.warm"
    strict = _with(warm, CHECK="strict")
    assert strict("run", path, "-b", bundle, "-q").returncode == 0  # imported as its own name
    assert _produce(strict, TUNED_READ, path, 1, bundle=bundle) == {"y": 1.0, "tunes": 0}
    # the same function name, another tolerance in its code: not this bundle's pick
    assert _produce(_with(warm, CHECK="loose"), TUNED_READ, path, 1, bundle=bundle)["tunes"] == 1


def _old_checksum(tunable: Tunable) -> str:
    payload = sorted((name, k.content_hash) for name, k in tunable.candidates.items())
    return hashlib.sha256(json.dumps(payload).encode()).hexdigest()


SRC = "void f(float *x, int n) { for (int i = 0; i < n; i++) x[i] = TILE; }"


def _launch(rt, k, x, *rest, stream=None) -> None:
    rt.launch(k, x, rest[-1], stream=stream)


def _tiles(name: str = "f", **kw) -> Tunable:
    kernels = {f"t{t}": Kernel(SRC, "f", "Pi", defines={"TILE": t}) for t in (1, 2)}
    return Tunable(name, kernels, _launch, **kw)


def _exact(outputs, inputs) -> None:
    np.testing.assert_array_equal(outputs[0], inputs[0])


def test_the_checksum_holds_the_check_only_when_there_is_one() -> None:
    plain = _tiles()
    assert plain.checksum == _old_checksum(plain)
    assert _tiles(check_tolerance=(0.5, 0.5)).checksum == plain.checksum
    sums = {
        _tiles(check="t1").checksum,
        _tiles(check="t2").checksum,
        _tiles(check="t1", check_tolerance=(1e-3, 1e-6)).checksum,
        _tiles(check=_exact).checksum,
        _tiles(check=lambda outputs, inputs: None).checksum,
        _tiles(check=lambda outputs, inputs: False).checksum,
    }
    assert len(sums) == 6 and plain.checksum not in sums
    assert _tiles(check=_exact).checksum == _tiles(check=_exact).checksum


STABLE = """
import json, sys
from warmcli import Kernel, Tunable
def check(outputs, inputs):
    return {"nan", "inf", "ok", "x", "y", "z"} and inputs[0] in {"a", "b", "c", "d"}
def tol(rtol):
    return lambda outputs, inputs: rtol
kernels = {"a": Kernel("void f(int n) {}", "f", "i"), "b": Kernel("void f(int n) { }", "f", "i")}
launch = lambda rt, k, n, *, stream=None: None
t = Tunable("t", kernels, launch, key=lambda n, s: (n, s), check=check)
print(json.dumps([t.checksum, t.shape_key((3, {"x", "y", "zz", "w", "v", "u"})),
                  Tunable("u", kernels, launch, check=tol(0.5)).checksum,
                  Tunable("u", kernels, launch, check=tol(0.25)).checksum]))
"""


def test_check_identities_and_sorted_set_keys_are_the_same_under_any_hash_seed() -> None:
    def run(seed: str) -> list[str]:
        env = {"PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        out = subprocess.run(
            [sys.executable, "-c", STABLE], env=env, capture_output=True, text=True, check=True
        )
        return json.loads(out.stdout)

    first, *others = (run(seed) for seed in ("1", "2", "3"))
    assert all(o == first for o in others)
    assert first[1] == "[3, \"{'u', 'v', 'w', 'x', 'y', 'zz'}\"]"
    assert first[2] != first[3], "a closure's plain value keys the check"


class _Cfg:
    def __init__(self, mode: str) -> None:
        self.mode = mode


def _as_before(value: object) -> object:
    """How a key's value JSON has no form for was keyed: its `str`, but a numpy number as the
    Python number it holds (trial39: as an input keys it, so `np.int64(3)` hits `3`)."""
    return value.item() if isinstance(value, np.bool_ | np.integer | np.floating) else str(value)


def test_valid_keys_are_unchanged_and_unstable_parts_are_refused() -> None:
    rt = Runtime(HostDevice())
    try:
        x = rt.buffer(8)
        values = [
            (x.shape, x.dtype, 8),
            (np.dtype("float32"), np.float32(1.5), np.int64(3), np.bool_(True), np.float64(2.5)),
            {"mode": "fast", "n": [1, 2], "scale": None, "on": True},
            [(2, 3), "fp16", 0.1],
            (frozenset({1, 2, 3}), {4, 5}),
            x,
            (np.arange(6), np.eye(2)),  # a small array's text is all of it
        ]
        for value in values:
            keyed = _tiles(key=lambda *inputs, value=value: value)
            assert keyed.shape_key((x, 8)) == json.dumps(value, default=_as_before), value
        assert _tiles(key=lambda x, n: f"n={n}").shape_key((x, 8)) == "n=8"
        refused = [
            ((_Cfg("fast"),), r"key= gave a _Cfg whose text \(<.*_Cfg object at 0x"),
            ((lambda: 0,), r"key= gave a function whose text"),
            (repr(_Cfg("fast")), r"key= gave a str whose text"),
            (({1, "a"},), r"key= gave a set of int, str, whose order is not the same"),
            ((frozenset({(1, 2)}),), r"key= gave a frozenset of tuple"),
            ({(1, 2): 3}, r"key= gave a value with no JSON text: keys must be"),
            ((np.arange(5000),), r"key= gave a ndarray of 5000 elements, whose text"),
        ]
        for value, message in refused:
            keyed = _tiles("cfg", key=lambda *inputs, value=value: value)
            with pytest.raises(TuneSpecError, match=r"^tunable cfg: " + message):
                keyed.shape_key((x, 8))
    finally:
        rt.close()


UNSTABLE_KEY = """
import os
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void f(float *x, int n) { for (int i = 0; i < n; i++) x[i] = TILE; }"


class Cfg:
    def __init__(self, mode):
        self.mode = mode


def launch(rt, k, x, cfg, n, *, stream=None):
    rt.launch(k, x, n, stream=stream)


KS = {f"t{t}": Kernel(SRC, "f", "Pi", defines={"TILE": t}) for t in (1, 2)}
MODES = Tunable("g", KS, launch, key=lambda x, cfg, n: (x.shape, {"fast", "exact", "a", "b"}, n))
BY_CFG = Tunable("f", KS, launch, key=lambda x, cfg, n: (x.shape, x.dtype, cfg, n))


def workload(rt):
    x = rt.buffer(8)
    rt.tune(MODES, x, Cfg("fast"), 8)
    if os.environ.get("BY_CFG"):
        rt.tune(BY_CFG, x, Cfg("fast"), 8)
"""

SERVE_KEYED = """
import json, runpy, sys
import warmcli
runpy.run_path(sys.argv[1])["workload"](warmcli.runtime("host"))
print(json.dumps({"tunes": len(warmcli.report().tunes)}))
"""


def test_a_key_of_no_stable_text_fails_warm_run_in_one_line_and_a_set_of_names_serves(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    path = workload_file(UNSTABLE_KEY)
    bundle = tmp_path / "k.warm"
    # (fresh processes: each its own hash seed)
    assert Warm(dict(warm.env, PYTHONHASHSEED="1"))("run", path, "-b", bundle, "-q").returncode == 0
    for seed in ("2", "3"):
        served = Warm(dict(warm.env, PYTHONHASHSEED=seed)).production(
            SERVE_KEYED, path, bundle=bundle
        )
        assert served == {"tunes": 0}, "a set of names keys alike in every process"
    by_cfg = _with(warm, BY_CFG="1")
    proc = by_cfg("run", path, "-b", tmp_path / "c.warm")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "tunable f: key= gave a Cfg whose text (<" in proc.stderr
    assert "memory address" in proc.stderr


def test_a_tune_keeps_only_its_own_threads_launches_on_the_measured_stream() -> None:
    rt = Runtime(HostDevice())
    started, filled = threading.Event(), threading.Event()

    def launch(rt, k, y, n, *, stream=None) -> None:
        rt.launch(k, y, n, stream=stream)
        if not started.is_set():  # the first measured run: let the other thread launch now
            started.set()
            assert filled.wait(30)

    slow = "void op(float *y, int n) { for (int i = 0; i < n; i++) y[i] = R; }"
    op = Tunable(
        "op", {f"r{r}": Kernel(slow, "op", "Pi", defines={"R": r}) for r in (1, 2)}, launch
    )
    fill_source = "void fill(float *z, int n, float v) { for (int i = 0; i < n; i++) z[i] = v; }"
    fill = Kernel(fill_source, "fill", "Pif")
    z = rt.buffer(100)

    def other() -> None:
        assert started.wait(30)
        rt.launch(fill, z, 100, 7.0)  # the default stream, which the tune measures on
        filled.set()

    try:
        with ProcessModeOverride(ProcessMode.EXECUTE):
            rt.launch(fill, z, 100, 0.0)  # compiled before the tune
            thread = threading.Thread(target=other)
            thread.start()
            y = rt.buffer(100)
            rt.tune(op, y, 100)
            thread.join()
            assert set(rt.read(z).tolist()) == {7.0}, "the tune undid another thread's write"
    finally:
        rt.close()


# A check whose helpers call each other as a lattice: 16 levels, 3 helpers each calling all
# 3 of the next level (43 million paths from the check, 48 helpers).
LATTICE = "".join(
    f"def h{i}_{j}(a):\n    return "
    + (" + ".join(f"h{i + 1}_{n}(a)" for n in range(3)) if i < 15 else "a")
    + "\n\n\n"
    for i in range(16)
    for j in range(3)
)
LATTICE_CHECK = CHECKED.replace(
    'CHECK = {"good"',
    LATTICE
    + "def lattice(outputs, inputs):\n"
    + "    assert h0_0  # named, not called: its calls would take as long as the paths\n"
    + "    np.testing.assert_allclose(outputs[0], inputs[0] ** 2, rtol=1e-6)\n\n\n"
    + 'CHECK = {"lattice": lattice, "good"',
)


def test_a_check_whose_helpers_share_helpers_keys_each_once_in_a_moment(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """Each helper a check reaches is keyed once, not once per path to it: a lattice of
    helpers (millions of paths) keys in a moment, and an edit deep in it is another check."""
    assert "def h15_2(a):\n    return a\n" in LATTICE_CHECK
    path = workload_file(LATTICE_CHECK)
    bundle = tmp_path / "lattice.warm"
    lattice = _with(warm, CHECK="lattice")
    proc = lattice("run", path, "-b", bundle, "-q", timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _produce(lattice, TUNED_READ, path, 1, bundle=bundle) == {"y": 1.0, "tunes": 0}
    deep = LATTICE_CHECK.replace("def h15_2(a):\n    return a", "def h15_2(a):\n    return a * 1")
    edited = workload_file(deep, "edited.py")
    assert _produce(lattice, TUNED_READ, edited, 1, bundle=bundle)["tunes"] == 1


# A check reading a module-level int too long for `repr` (Python refuses past 4,300 digits).
BIG_CHECK = CHECKED.replace(
    'CHECK = {"good"',
    "MODULUS = 10**5000 + int(os.environ.get('PLUS', '0'))\n\n\n"
    "def big(outputs, inputs):\n"
    "    assert MODULUS > 0\n"
    "    np.testing.assert_allclose(outputs[0], inputs[0] ** 2, rtol=1e-6)\n\n\n"
    'CHECK = {"big": big, "good"',
)


def test_a_check_reading_an_int_too_long_to_print_keys_it_and_never_raises(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    path = workload_file(BIG_CHECK)
    bundle = tmp_path / "big.warm"
    big = _with(warm, CHECK="big")
    proc = big("run", path, "-b", bundle, "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _produce(big, TUNED_READ, path, 1, bundle=bundle) == {"y": 1.0, "tunes": 0}
    assert _produce(_with(big, PLUS="1"), TUNED_READ, path, 1, bundle=bundle)["tunes"] == 1
