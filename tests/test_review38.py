"""review38: today's merges (trial38, tune38) reviewed as a user and an attacker would.

Each test names the bug it covers; the real CLI in a subprocess, the real cc and real
bundles where a process is involved, plain calls for pure logic.
"""

from __future__ import annotations

import copy
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from warmcli import Kernel, Tunable

ROOT = Path(__file__).resolve().parent.parent


def _launch_nothing(rt: object, kernel: object, y: object, *, stream: object = None) -> None:
    pass


def test_a_tunable_still_converts_with_dataclasses_asdict() -> None:
    """Records document `dataclasses.asdict` as working; tune38's fixed candidates broke it
    (`FixedCandidates.__init__() missing 1 required positional argument`), as it did
    `astuple` and `type(c).fromkeys`. The candidates come out as a plain dict, the caller's
    own, and the tunable's own stay fixed."""
    a, b = Kernel("void f(float *y) { }", "f", "P"), Kernel("void f(float *y) {  }", "f", "P")
    t = Tunable("t", {"a": a, "b": b}, _launch_nothing)
    out = dataclasses.asdict(t)
    assert type(out["candidates"]) is dict and list(out["candidates"]) == ["a", "b"]
    out["candidates"]["c"] = {}  # the caller's own
    assert list(t.candidates) == ["a", "b"]
    assert len(dataclasses.astuple(t)[1]) == 2
    assert dict(type(t.candidates).fromkeys(["a"])) == {"a": None}
    with pytest.raises(TypeError, match="tunable t: its candidates are fixed"):
        copy.deepcopy(t).candidates["c"] = a  # type: ignore[index]


class _Lazy(dict):  # type: ignore[type-arg]
    """A dict subclass that holds sources and reads them as Kernels (`items`, `[]`)."""

    def __getitem__(self, name: str) -> Kernel:
        return Kernel(super().__getitem__(name), "f", "P")

    def items(self):  # type: ignore[no-untyped-def,override]
        return [(name, self[name]) for name in self]


def test_a_dict_subclass_is_fixed_as_it_was_checked() -> None:
    """tune38 checked the candidates through their `items()` but fixed a copy of the dict's
    own storage (what `dict(c)` reads of a subclass): a subclass that reads its values as
    Kernels was checked as Kernels and then held its raw values, `AttributeError: 'str'
    object has no attribute 'content_hash'` where the Tunable was made. What was checked
    is what is fixed."""
    lazy = _Lazy({"a": "void f(float *y) { }", "b": "void f(float *y) {  }"})
    t = Tunable("t", lazy, _launch_nothing)
    assert [type(k) for k in t.candidates.values()] == [Kernel, Kernel]
    plain = Tunable("t", dict(lazy.items()), _launch_nothing)
    assert t.checksum == plain.checksum


SPEC_ERROR = """
import numpy as np, warmcli
from warmcli import Kernel, Tunable
SRC = "void f(float *y, long n) { for (long i = 0; i < n; i++) y[i] += A; }"
def launch(rt, kernel, y, n, *, stream=None):
    rt.launch(kernel, y, n, stream=stream)
T = Tunable("spec", {"a": Kernel(SRC, "f", "Pl", defines={"A": 1}),
                     "b": Kernel(SRC, "f", "Pl", defines={"A": 2})}, launch, restore=[5])
rt = warmcli.runtime()
try:
    rt.tune(T, rt.upload(np.zeros(4, np.float32)), 4)
except ValueError as e:  # a TuneSpecError
    print("caught", e)
"""


def test_a_tune_refused_for_its_spec_is_not_reported_as_interrupted(tmp_path: Path) -> None:
    """tune38 named every tune whose measuring raised anything but a `TuneFailure` as one a
    Ctrl-C cut short: a `restore=` naming no input (a `TuneSpecError` the workload catches)
    was reported `tune spec ... (measuring interrupted: nothing stored)`, `tuned 1
    operation(s)`, though nothing was measured nor interrupted. Only a Ctrl-C is."""
    (tmp_path / "w.py").write_text(SPEC_ERROR)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(WARM_HOME=str(tmp_path / "home"), WARM_REPORT="1", PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "w.py"], capture_output=True, text=True, env=env, cwd=tmp_path,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and "caught tunable spec: restore" in done.stdout, done.stderr
    assert "interrupted" not in done.stderr, done.stderr
    assert "tuned 0 operation(s)" in done.stderr, done.stderr


def test_a_pick_served_without_a_compiler_runs_the_build_it_was_checked_on(
    tmp_path: Path,
) -> None:
    """Two setups share a bundle: one warmed through a wrapper `WARM_CC` adding `-DFAST`
    (whose `quick` build the check refuses), then one without (its re-warm measures the
    tune again on its own builds: pick `quick`, checked on the plain build). A production
    machine with no compiler is served a build of each candidate, the wrapper's: tune38
    judged the plain pick against no toolchain at all (everything serves where nothing
    compiles) and served `quick` unchecked on the `-DFAST` build, which zeroes `y` where
    every cold start computes `y * 2 + x`. The pick is judged against the build that runs."""
    from test_tune38 import PRODUCTION, WORKLOAD

    (tmp_path / "w.py").write_text(WORKLOAD)
    (tmp_path / "cc.sh").write_text('#!/bin/sh\nexec cc $CFLAGS "$@"\n')
    (tmp_path / "cc.sh").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_") and k != "CFLAGS"}
    env.update(WARM_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))
    env["WARM_CC"] = str(tmp_path / "cc.sh")

    def run(argv: list[str], **extra: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            argv, capture_output=True, text=True, env={**env, **extra}, cwd=tmp_path, timeout=120
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    warm = [sys.executable, "-m", "warmcli", "run", "w.py", "-b", "b.warm", "-q"]
    run(warm, CFLAGS="-DFAST")
    run(warm)
    out = tmp_path / "out.npy"
    served = run(
        [sys.executable, "-c", PRODUCTION, "w.py"],
        WARM_CC=str(tmp_path / "no-such-cc"), WARM_BUNDLE="b.warm", OUT=str(out),
        WARM_REPORT="1",
    )  # fmt: skip
    y, x = np.arange(64, dtype=np.float32), np.linspace(-1, 1, 64, dtype=np.float32)
    assert np.load(out).tobytes() == (y * 2 + x).tobytes(), served.stdout + served.stderr
    # `warm check` on that machine says what production does: the tune is measured again
    # where the build served is the wrapper's (which of the two is served: by their keys,
    # the same in every process, verify38), else served.
    check = [sys.executable, "-m", "warmcli", "check", "b.warm", "--json"]
    nothing = {**env, "WARM_CC": str(tmp_path / "no-such-cc")}
    said = subprocess.run(check, capture_output=True, text=True, env=nothing, cwd=tmp_path)
    remeasured = "served everything" not in served.stderr
    assert said.returncode == int(remeasured), said.stdout + said.stderr + served.stderr
    assert remeasured == ('"reason": "toolchain"' in said.stdout), said.stdout
