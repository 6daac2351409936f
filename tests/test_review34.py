"""Review of stop 34's merged change: what its fixes left open, each with real parts.

- A check holding two objects of one class (`Judge(Strict(1e-3), Strict(1e-3))`, two
  bound methods of two objects) keyed the second by its qualified name only, as if it
  were the first reached again: changing the second's setting kept the old picks.
- A check object holding `functools.partial`s of its own methods (`self.close =
  partial(self._cmp, rtol=...)`) was walked again along every path: two took seconds
  where the Tunable was made (at import, in production too), three minutes.
- A helper of the check's module behind `functools.cache` (a global it calls, a function
  it holds) was not keyed, or keyed by its name only (a C wrapper: no code of its own):
  changing what it returns kept the old picks.
- A launch function making its own workspace on every call (`ws = rt.buffer(n)`) failed
  every candidate but the reference under `check=` (identical kernels: `check: output 2
  differs ... 0.0 != 2.0`): each run's workspace, kept beside the inputs, was compared
  with the reference's, which the candidate never launched on, or with its contents
  before the run; a callable check was handed a list of outputs growing with each run.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import Kernel, Tunable

_SRC = "void f(float *y, int n) { }"
_KS = {f"c{i}": Kernel(_SRC, "f", "Pi", defines={"W": i}) for i in range(2)}


def _launch(rt, kernel, y, n, *, stream=None):  # type: ignore[no-untyped-def]
    rt.launch(kernel, y, n, stream=stream)


class _Strict:
    def __init__(self, rtol: float) -> None:
        self.rtol = rtol

    def __call__(self, outputs, inputs):  # type: ignore[no-untyped-def]
        return np.allclose(outputs[0], inputs[0], rtol=self.rtol)


class _Both:
    def __init__(self, a, b) -> None:  # type: ignore[no-untyped-def]
        self.a, self.b = a, b

    def __call__(self, outputs, inputs):  # type: ignore[no-untyped-def]
        return self.a(outputs, inputs) and self.b(outputs, inputs)


def _sum(check) -> str:  # type: ignore[no-untyped-def]
    return Tunable("op", _KS, _launch, check=check).checksum


def test_two_objects_of_one_class_a_check_holds_are_each_keyed() -> None:
    same = _sum(_Both(_Strict(1e-3), _Strict(1e-3)))
    assert _sum(_Both(_Strict(1e-3), _Strict(0.5))) != same
    assert _sum(_Both(_Strict(0.5), _Strict(1e-3))) != same
    assert _sum(_Both(_Strict(1e-3), _Strict(1e-3))) == same  # stable


def test_bound_methods_of_two_objects_a_check_holds_are_each_keyed() -> None:
    same = _sum(_Both(_Strict(1e-3).__call__, _Strict(1e-3).__call__))
    assert _sum(_Both(_Strict(1e-3).__call__, _Strict(0.5).__call__)) != same


PARTIALS = """
import functools
import numpy as np
from warmcli import Kernel, Tunable

SRC = "void f(float *y, int n) { }"
KS = {f"c{i}": Kernel(SRC, "f", "Pi", defines={"W": i}) for i in range(2)}


def launch(rt, kernel, y, n, *, stream=None):
    rt.launch(kernel, y, n, stream=stream)


class Judge:
    def __init__(self, n):
        for i in range(n):
            setattr(self, f"p{i}", functools.partial(self._cmp, rtol=10.0 ** -i))

    def _cmp(self, outputs, inputs, rtol=1e-3):
        return np.allclose(outputs[0], inputs[0], rtol=rtol)

    def __call__(self, outputs, inputs):
        return self.p0(outputs, inputs)


sums = {Tunable("op", KS, launch, check=Judge(n)).checksum for n in (1, 6)}
print(len(sums))
"""


def test_a_check_holding_partials_of_its_own_methods_is_keyed_at_once(tmp_path: Path) -> None:
    script = tmp_path / "partials.py"
    script.write_text(PARTIALS)
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # this tree's warmcli
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2"


def test_a_partial_held_twice_keys_its_arguments() -> None:
    def cmp(outputs, inputs, rtol):  # type: ignore[no-untyped-def]
        return np.allclose(outputs[0], inputs[0], rtol=rtol)

    one = functools.partial(cmp, rtol=1e-3)
    assert _sum(_Both(one, functools.partial(cmp, rtol=1e-3))) != _sum(
        _Both(one, functools.partial(cmp, rtol=0.5))
    )


CACHED = """
import functools
import numpy as np
from warmcli import Kernel, Tunable

SRC = "void f(float *y, int n) {{ }}"
KS = {{f"c{{i}}": Kernel(SRC, "f", "Pi", defines={{"W": i}}) for i in range(2)}}


def launch(rt, kernel, y, n, *, stream=None):
    rt.launch(kernel, y, n, stream=stream)


@functools.cache
def tol_for(kind):
    return {tol}


def check(outputs, inputs):
    return np.allclose(outputs[0], inputs[0], rtol=tol_for(outputs[0].dtype.kind))


def make(judge):
    def held(outputs, inputs):
        return judge(outputs[0].dtype.kind) > 0

    return held


print(Tunable("op", KS, launch, check=check).checksum)
print(Tunable("op", KS, launch, check=make(tol_for)).checksum)
"""


def test_a_helper_behind_functools_cache_keys_the_check(tmp_path: Path) -> None:
    sums = []
    for tol in ("1e-3", "0.5"):
        script = tmp_path / "app.py"  # one module, two versions of its helper's code
        script.write_text(CACHED.format(tol=tol))
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        done = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env
        )
        assert done.returncode == 0, done.stderr
        sums.append(done.stdout.split())
    assert sums[0][0] != sums[1][0], "a global the check calls"
    assert sums[0][1] != sums[1][1], "a function the check holds"


TEMPORARY = """\
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = '''void f(float *y, float *ws, int n) {
  for (int i = 0; i < n; i++) ws[i] = y[i] * 2.0f;
  for (int i = 0; i < n; i++) y[i] = ws[i] + 1.0f;
}'''


def launch(rt, kernel, y, n, *, stream=None):
    ws = rt.buffer(n)  # a workspace of its own, made on every call
    rt.launch(kernel, y, ws, n, stream=stream)


def ok(outputs, inputs):
    return len(outputs) == 1 and bool((outputs[0] == inputs[0] * 2 + 1).all())


KS = {f"t{i}": Kernel(SRC, "f", "PPi", defines={"UNUSED": i}) for i in range(3)}
T = Tunable("temporary", KS, launch, check=CHECK)


def workload(rt):
    rt.tune(T, rt.upload(np.arange(8, dtype=np.float32)), 8)
"""


@pytest.mark.parametrize("check", ['"t0"', "ok"])
def test_a_workspace_the_launch_function_makes_per_call_fails_no_candidate(
    warm: Warm, workload_file, bundle_path: Path, check: str
) -> None:
    proc = warm("run", workload_file(TEMPORARY.replace("CHECK", check)), "-b", bundle_path)
    assert proc.returncode == 0, proc.stderr
    [tune] = warm.json("stats", bundle_path)["tunes"]
    status = {c["name"]: (c["status"], c.get("reason") or "") for c in tune["candidates"]}
    assert all(s == "ok" for s, _ in status.values()), status


def test_a_partial_that_holds_itself_is_keyed_once() -> None:
    def cmp(outputs, inputs, judge=None):  # type: ignore[no-untyped-def]
        return True

    looped = functools.partial(cmp)
    looped.__setstate__((looped, (), {}, None))  # its function: itself (pickle can make one)
    held = functools.partial(cmp)
    held.__setstate__((cmp, (), {"judge": held}, None))
    for check in (looped, held):
        assert len(_sum(check)) == 64
