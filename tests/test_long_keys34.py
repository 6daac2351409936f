"""A tune key's text may be as long as a bundle holds (4 MiB, `tune_spec.fits`): tables cut
it (`warm stats`, `diff`, `merge`), but the lines naming one miss printed or logged it
whole, each as long as the key: `warm run`'s and `warm verify --workload`'s miss lines,
`WARM_EXPLAIN=1`'s, `WARM_STRICT=warn`'s, `WARM_REPORT=1`'s list and a `TuneFailure`'s
message. Each is cut now as a table cell is, saying the length.

The workload is warmed once for the module (`once`) and copied with its warm home for
each test; the `warm` commands and production processes are forks of ones that imported warm
once (`tests/forked_cli.py`, `tests/forked_python.py`): what is tested is the lines they print,
not how a process starts."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm, as_run_in
from forked_cli import (
    Servers,
    forked_warm,  # noqa: F401  (conftest's `warm`, commands forked)
    warmed_once,
)

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


@pytest.fixture(scope="module")
def once(tmp_path_factory: pytest.TempPathFactory, forking_servers: Servers) -> Path:
    """`WORKLOAD` warmed once for the module (`forked_cli.warmed_once`): what `warmed`
    copies for each test."""
    return warmed_once(tmp_path_factory.mktemp("long-keys"), WORKLOAD, forking_servers)


@pytest.fixture
def warmed(warm: Warm, tmp_path: Path, once: Path) -> tuple[Warm, Path]:
    """`w.py` in `tmp_path`, warmed into `b.warm` by `warm` (`once`'s, copied)."""
    return warm, as_run_in(once, warm, tmp_path)


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
def test_production_lines_cut_a_long_key(
    warmed: tuple[Warm, Path], env: dict[str, str], forking_servers: Servers
) -> None:
    warm, tmp_path = warmed
    environ = dict(warm.env, TAG="b", WARM_BUNDLE=str(tmp_path / "b.warm"), **env)
    done = forking_servers.pythons(environ).run(SERVE, str(tmp_path), env=environ, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "long" in done.stderr and "characters)" in done.stderr, done.stderr[-2000:]
    assert _longest(done.stderr) < 5000, _longest(done.stderr)


def test_a_tune_failure_names_a_long_key_cut(warm: Warm, forking_servers: Servers) -> None:
    environ = dict(warm.env, WARM_BUNDLE="")
    done = forking_servers.pythons(environ).run(FAILING, env=environ, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    size, first = done.stdout.split(maxsplit=1)
    assert int(size) < 5000 and "every candidate failed" in first, done.stdout[:300]
    assert shutil.which(sys.executable)
