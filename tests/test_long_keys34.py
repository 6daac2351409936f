"""A tune key's text may be as long as a bundle holds (4 MiB, `tune_spec.fits`): tables cut
it (`warm stats`, `diff`, `merge`), but the lines naming one miss printed or logged it
whole, each as long as the key: `warm run`'s and `warm verify --workload`'s miss lines,
`WARM_EXPLAIN=1`'s, `WARM_STRICT=warn`'s, `WARM_REPORT=1`'s list and a `TuneFailure`'s
message. Each is cut now as a table cell is, saying the length."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

LONG = 200_000  # characters of the key's text: far over a line, far under the limit
WORKLOAD = f"""
import os
import numpy as np
from warmcli import Kernel, Tunable
SRC = "void k(float *y, long n) {{ for (long i = 0; i < n; i++) y[i] *= S; }}"
KS = {{f"s{{i}}": Kernel(SRC, "k", "Pl", defines={{"S": 2}}) for i in range(2)}}
def launch(rt, kernel, y, n, *, stream=None):
    rt.launch(kernel, y, n, stream=stream)
T = Tunable("long", KS, launch, key=lambda y, n: os.environ.get("TAG", "a") * {LONG})
def workload(rt):
    y = rt.upload(np.ones(8, np.float32))
    rt.tune(T, y, 8)
"""
SERVE = """
import sys, warmcli
sys.path.insert(0, sys.argv[1])
import w
w.workload(warmcli.runtime("host"))
"""
FAILING = f"""
import numpy as np, warmcli
from warmcli import Kernel, Tunable
K = Kernel("void k(float *y, long n) {{ }}", "k", "Pl")
def launch(rt, kernel, y, n, *, stream=None):
    raise ValueError("no")
T = Tunable("fails", {{"a": K, "b": K}}, launch, key=lambda y, n: "x" * {LONG})
rt = warmcli.runtime("host")
try:
    rt.tune(T, rt.upload(np.ones(8, np.float32)), 8)
except warmcli.TuneFailure as exc:
    print(len(str(exc)), str(exc).splitlines()[0][-40:])
"""


def _longest(text: str) -> int:
    return max((len(line) for line in text.splitlines()), default=0)


@pytest.fixture
def warmed(warm: Warm, tmp_path: Path) -> tuple[Warm, Path]:
    (tmp_path / "w.py").write_text(WORKLOAD)
    done = warm("run", tmp_path / "w.py", "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 0, done.stderr[-2000:]
    return warm, tmp_path


def test_verify_miss_lines_cut_a_long_key(warmed: tuple[Warm, Path]) -> None:
    warm, tmp_path = warmed
    warm.env["TAG"] = "b"  # another key: a miss, explained
    done = warm("verify", tmp_path / "b.warm", "--workload", tmp_path / "w.py")
    assert done.returncode == 1, done.stderr[-2000:]
    out = done.stdout + done.stderr
    assert "miss: tune long" in out, out[-2000:]
    assert f"({LONG + 2:,} characters)" in out or "characters)" in out, out[-3000:]
    assert _longest(out) < 5000, _longest(out)


@pytest.mark.parametrize(
    "env", [{"WARM_EXPLAIN": "1"}, {"WARM_STRICT": "warn"}, {"WARM_REPORT": "1"}]
)
def test_production_lines_cut_a_long_key(warmed: tuple[Warm, Path], env: dict[str, str]) -> None:
    warm, tmp_path = warmed
    done = subprocess.run(
        [sys.executable, "-c", SERVE, str(tmp_path)],
        capture_output=True,
        text=True,
        env=dict(warm.env, TAG="b", WARM_BUNDLE=str(tmp_path / "b.warm"), **env),
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "long" in done.stderr and "characters)" in done.stderr, done.stderr[-2000:]
    assert _longest(done.stderr) < 5000, _longest(done.stderr)


def test_a_tune_failure_names_a_long_key_cut(warm: Warm, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", FAILING],
        capture_output=True,
        text=True,
        env=dict(warm.env, WARM_BUNDLE=""),
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    size, first = done.stdout.split(maxsplit=1)
    assert int(size) < 5000 and "every candidate failed" in first, done.stdout[:300]
    assert shutil.which(sys.executable)
