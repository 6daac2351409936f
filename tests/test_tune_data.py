"""Tuning never changes the data: in-place kernels, candidates that raise, output checks.

Through the real CLI (`warm run`, `warm stats`) and real production processes (each a fork
of one that imported the CLI, or numpy and warmcli, once: `tests/forked_cli.py`): a tune
measured cold, served hot from a bundle, and numpy must agree.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli import Kernel, ProcessMode, ProcessModeOverride, Runtime, Tunable
from warmcli.backends.host import HostDevice

AXPY = '''
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SOURCE = """
void axpy(float *y, const float *x, float a, int n) {
    for (int i = 0; i < n; i += STEP)
        for (int j = i; j < i + STEP && j < n; j++) y[j] += a * x[j] + WRONG;
}"""


def launch(rt, kernel, y, x, a, n, *, stream=None):
    if kernel.define("RAISE") == "1":
        raise RuntimeError("this candidate cannot run\\nshape too small for it")
    rt.launch(kernel, y, x, a, n, stream=stream)


def candidates(**extra):
    return {
        name: Kernel(SOURCE, "axpy", "PPfi", defines={"STEP": s, "WRONG": 0, **extra.get(name, {})})
        for name, s in (("s1", 1), ("s4", 4), ("s8", 8))
    }


PLAIN = Tunable("axpy", candidates(), launch)
RAISING = Tunable("axpy_raising", candidates(s4={"RAISE": 1}), launch)
CHECKED = Tunable("axpy_checked", candidates(s8={"WRONG": "1.0f"}), launch, check="s1")


def by_numpy(outputs, inputs):
    y, x, a, n = inputs
    np.testing.assert_allclose(outputs[0], y + a * x, rtol=1e-6)


USER_CHECKED = Tunable("axpy_user", candidates(s4={"WRONG": "2.0f"}), launch, check=by_numpy)


def run(rt):
    out = {}
    for op in (PLAIN, RAISING, CHECKED, USER_CHECKED):
        y = rt.upload(np.ones(16, np.float32))
        x = rt.upload(np.arange(16, dtype=np.float32))
        rt.tune(op, y, x, 0.5, 16)
        out[op.name] = y
    return out


def workload(rt):
    run(rt)
'''

SERVE = """
import json, runpy, sys
import warmcli
module = runpy.run_path(sys.argv[1])
rt = warmcli.runtime("host")
out = {name: rt.read(y).tolist() for name, y in module["run"](rt).items()}
print(json.dumps({"y": out, "tunes_measured": len(warmcli.report().tunes)}))
"""


def test_in_place_tune_agrees_cold_hot_and_with_numpy_and_bad_candidates_are_excluded(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    path = workload_file(AXPY)
    expected = (
        np.ones(16, np.float32) + np.float32(0.5) * np.arange(16, dtype=np.float32)
    ).tolist()
    cold = warm.production(SERVE, path)
    assert cold["tunes_measured"] == 4
    assert cold["y"]["axpy"] == expected, "a cold start applied the in-place kernel more than once"
    proc = warm("run", path, "--bundle", bundle_path)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    hot = warm.production(SERVE, path, bundle=bundle_path)
    assert hot["tunes_measured"] == 0
    assert hot["y"] == cold["y"]
    for name in ("axpy", "axpy_raising", "axpy_checked", "axpy_user"):
        assert hot["y"][name] == expected, name
    # a candidate that raised, or whose outputs were wrong, is excluded with its reason
    stats = warm.json("stats", bundle_path)
    failed = {
        (t["operation"], c["name"]): c["reason"]
        for t in stats["tunes"]
        for c in t["candidates"]
        if c["status"] == "failed"
    }
    assert failed[("axpy_raising", "s4")] == "RuntimeError: shape too small for it"
    assert failed[("axpy_checked", "s8")].startswith("check: output 1 (float32[16]) differs from")
    assert "'s1'" in failed[("axpy_checked", "s8")]
    assert failed[("axpy_user", "s4")].startswith("check: AssertionError")
    assert len(failed) == 3, failed
    picks = {t["operation"]: t["pick"] for t in stats["tunes"]}
    assert picks["axpy_raising"] != "s4" and picks["axpy_checked"] != "s8"
    text = warm("stats", bundle_path, "--explain", "axpy_checked").stdout
    assert "failed: check: output 1" in text


SCALE = """
void scale(float *y, float *x, int n) {
    for (int i = 0; i < n; i++) { y[i] *= 2.0f; x[i] += 1.0f; }
}
"""


def scale_launch(rt: Runtime, kernel: Kernel, y, x, n: int, *, stream=None) -> None:
    rt.launch(kernel, y, x, n, stream=stream)


def scale_tunable(name: str = "scale", **kw) -> Tunable:
    kernels = {f"v{v}": Kernel(SCALE, "scale", "PPi", defines={"V": v}) for v in (1, 2)}
    return Tunable(name, kernels, scale_launch, warmup=1, repeats=2, **kw)


@pytest.fixture
def host_yx():
    """A host runtime with y = ones(4) and x = zeros(4)."""
    rt = Runtime(HostDevice())
    try:
        yield rt, rt.upload(np.ones(4, np.float32)), rt.upload(np.zeros(4, np.float32))
    finally:
        rt.close()


def test_restore_narrows_what_is_kept_and_discard_modes_change_nothing(host_yx) -> None:
    rt, y, x = host_yx
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE):
        rt.tune(scale_tunable(), y, x, 4)  # every buffer kept; the pick is discarded
    assert rt.device.download(y).tolist() == [1.0] * 4
    assert rt.device.download(x).tolist() == [0.0] * 4
    with ProcessModeOverride(ProcessMode.EXECUTE):
        rt.tune(scale_tunable("scale_y", restore=("y",)), y, x, 4)
    # y was kept and put back, then the pick ran once; x (not kept) saw every run:
    # 2 candidates x (1 warm-up + 2 repeats) + the pick
    assert rt.read(y).tolist() == [2.0] * 4
    assert rt.read(x).tolist() == [7.0] * 4


def test_restore_and_check_are_checked_when_the_tunable_is_made() -> None:
    with pytest.raises(ValueError, match=r"restore names 'z'.*inputs: y, x, n"):
        scale_tunable(restore=("z",))
    with pytest.raises(ValueError, match="check names 'v9', which is no candidate"):
        scale_tunable(check="v9")
    assert scale_tunable(restore=(1,)).restore_positions == (1,)


def test_restore_by_position_or_callable_and_a_non_buffer_is_refused(host_yx) -> None:
    rt, y, x = host_yx
    with ProcessModeOverride(ProcessMode.EXECUTE):
        rt.tune(scale_tunable("by_position", restore=(0, 1)), y, x, 4)
        assert (rt.read(y).tolist(), rt.read(x).tolist()) == ([2.0] * 4, [1.0] * 4)
        rt.tune(scale_tunable("by_callable", restore=lambda y, x, n: [x]), y, x, 4)
        assert rt.read(x).tolist() == [2.0] * 4  # kept: only the pick's run shows
        assert rt.read(y).tolist() == [2.0 * 2**7] * 4  # not kept: 6 runs + the pick
        with pytest.raises(
            ValueError,
            match=r"restore names input 2 \(from 0\), which is not a buffer \(int 4\)",
        ):
            rt.tune(scale_tunable("not_a_buffer", restore=(2,)), y, x, 4)
