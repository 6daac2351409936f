"""judged40: a tune's output check that judged nothing says so (real CLI, real cc).

A checked Tunable warmed on inputs where every candidate agrees (zeros, as `rt.buffer`
makes; a scale of 0) passed a wrong candidate, the bundle stored it as the pick, and a hit
computed 3.0 where a cold start computed 2.0; warm said nothing. Now a check whose accepted
outputs tell no candidate apart (every compared output left as it was, or one value
throughout: a candidate that launched nothing, or filled one value, would pass it) is
noted once in the pass that measured it, naming the tunable and what to do, under
`warm run` and in a production process's tune miss alike. The pick and the keys are as
they were. Real data (out of place or in place) and a tune without a check say nothing.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

WORKLOAD = """
import os, numpy as np, warmcli
from warmcli import Kernel, Tunable
DEVICE = "host"
SRC = '''
void ax(float *y, const float *x, int n) {
    for (volatile int k = 0; k < SPIN; k++) ;
    for (int i = 0; i < n; i++) y[i] = y[i] * KEEP + 2.0f * x[i] * SCALE;
}'''
KEEP = os.environ.get("KEEP", "1.0f")  # 0.0f: out of place
def launch(rt, k, y, x, n, *, stream=None):
    rt.launch(k, y, x, n, stream=stream)
def close(outputs, inputs):  # the callable check: y * KEEP + 2x
    y, x, _ = inputs
    keep = float(KEEP.rstrip("f"))
    return bool(np.allclose(outputs[0], y * keep + 2 * x))
CHECK = {"ref": "ref", "none": None, "callable": close}[os.environ["CHECK"]]
RESTORE = () if os.environ.get("RESTORE") == "none" else None
T = Tunable("ax", {
    "ref": Kernel(SRC, "ax", "PPi", defines={"SPIN": 300000, "SCALE": "1.0f", "KEEP": KEEP}),
    "fast_wrong": Kernel(SRC, "ax", "PPi", defines={"SPIN": 0, "SCALE": "1.5f", "KEEP": KEEP}),
}, launch, check=CHECK, restore=RESTORE)
def workload(rt):
    rng = np.random.default_rng(7)
    data = os.environ["DATA"]
    x = np.zeros(64, np.float32) if data == "zeros" else rng.standard_normal(64, np.float32)
    x = rt.upload(x)
    y = rt.buffer(64) if data == "zeros" else rt.upload(rng.standard_normal(64, np.float32))
    return rt.tune(T, y, x, 64)
if __name__ == "__main__":
    import json
    pick = workload(warmcli.runtime())
    print(json.dumps({"pick": pick, "notes": warmcli.report().notes}))
"""

WARNING = "its check could not tell candidates apart"


def _warm_run(warm: Warm, tmp_path: Path, **env: str) -> tuple[list[str], str]:
    """`warm run --json` of the workload under `env`: the notes of every pass, and the pick
    the bundle stored."""
    script, bundle = tmp_path / "w.py", tmp_path / "w.warm"
    script.write_text(WORKLOAD)
    warm.env.update(env)
    done = warm("run", script, "-b", bundle, "--json")
    assert done.returncode == 0, done.stderr
    notes = [n for p in json.loads(done.stdout)["passes"] for n in p["notes"]]
    with sqlite3.connect(bundle) as db:
        picks = [row[0] for row in db.execute("SELECT pick FROM tunes")]
    assert len(picks) == 1
    return notes, picks[0]


@pytest.mark.parametrize(
    "env",
    [
        {"CHECK": "ref", "DATA": "zeros"},  # in place, y += 2x: every output left as it was
        {"CHECK": "ref", "DATA": "zeros", "KEEP": "0.0f", "RESTORE": "none"},  # y = 2x: all 0
        {"CHECK": "callable", "DATA": "zeros"},
    ],
    ids=["reference", "out-of-place-restore-none", "callable"],
)
def test_a_check_warmed_on_zeros_is_named_once_the_pick_unchanged(
    warm: Warm, tmp_path: Path, env: dict[str, str]
) -> None:
    notes, pick = _warm_run(warm, tmp_path, **env)
    warned = [n for n in notes if WARNING in n]
    assert len(warned) == 1, notes
    assert warned[0].startswith("tune ax float32[64] float32[64] 64: ")
    assert "warm it on inputs that tell them apart" in warned[0]
    assert pick == "fast_wrong"  # what was picked before: the note changes nothing


@pytest.mark.parametrize(
    "env",
    [
        {"CHECK": "ref", "DATA": "random", "KEEP": "0.0f"},  # out of place on real data
        {"CHECK": "ref", "DATA": "random"},  # in place on real data
        {"CHECK": "callable", "DATA": "random"},
        {"CHECK": "ref", "DATA": "random", "KEEP": "0.0f", "RESTORE": "none"},
        {"CHECK": "none", "DATA": "zeros"},  # no check: nothing judged, nothing to say
    ],
    ids=["out-of-place", "in-place", "callable", "restore-none", "no-check"],
)
def test_real_data_and_an_unchecked_tune_say_nothing(
    warm: Warm, tmp_path: Path, env: dict[str, str]
) -> None:
    notes, pick = _warm_run(warm, tmp_path, **env)
    assert not [n for n in notes if WARNING in n], notes
    assert pick == ("fast_wrong" if env["CHECK"] == "none" else "ref")


def test_a_production_tune_miss_on_zeros_notes_it_in_its_report(warm: Warm, tmp_path: Path) -> None:
    script = tmp_path / "w.py"
    script.write_text(WORKLOAD)
    env = dict(warm.env, CHECK="ref", DATA="zeros", WARM_REPORT="1")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert shown["pick"] == "fast_wrong"
    assert len(shown["notes"]) == 1 and shown["notes"][0].startswith("tune ax "), shown
    assert WARNING in shown["notes"][0]
    printed = [line for line in done.stderr.splitlines() if WARNING in line]
    assert printed == [f"  note: {shown['notes'][0]}"], done.stderr
    env.update(DATA="random")  # real data: a report with no note
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=60
    )
    assert json.loads(done.stdout)["notes"] == [] and WARNING not in done.stderr
