"""A check callable gets the inputs as they were before tuning, for every candidate: the
read-back inputs were one set shared by every candidate's check, so a check that edited
them in place (normalising, `i[0] *= 2`) judged each later candidate against the edited
values. Each check call gets its own copy now. The production process is a fork of one that
imported numpy and warmcli once (`tests/forked_python.py`): no bundle, a cold tune."""

from __future__ import annotations

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, each process forked)

CODE = """
import json, numpy as np, warmcli
from warmcli import Kernel, Tunable
SRC = "void k(float *x, float *y, long n) { for (long i = 0; i < n; i++) y[i] = x[i] * 2; }"
KS = {f"c{i}": Kernel(SRC, "k", "PPl", defines={"C": i}) for i in range(3)}
SEEN = []
def launch(rt, kernel, x, y, n, *, stream=None):
    rt.launch(kernel, x, y, n, stream=stream)
def check(outputs, inputs):
    SEEN.append(float(inputs[0].sum()))
    ok = bool(np.allclose(outputs[-1], inputs[0] * 2))
    np.multiply(inputs[0], 10, out=inputs[0])  # edits what it was given
    return ok
T = Tunable("t", KS, launch, check=check, restore=("y",))
rt = warmcli.runtime("host")
x, y = rt.upload(np.ones(8, np.float32)), rt.upload(np.zeros(8, np.float32))
rt.tune(T, x, y, 8)
print(json.dumps({"seen": SEEN, "y": float(rt.read(y)[0])}))
"""


def test_each_check_call_gets_the_inputs_as_they_were(warm: Warm) -> None:
    got = warm.production(CODE)  # a process of its own, no bundle: a cold tune
    assert got["seen"] == [8.0, 8.0, 8.0], got
    assert got["y"] == 2.0, got
