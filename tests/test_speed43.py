"""`tests/rewritten.py`: a distributed run's controller writes the test modules'
assert-rewritten code once, and the code read back is pytest's own: a failing assert still
says the values it compared, and a test edited after is rewritten again, never run stale.

Each test runs a real pytest in a subprocess over a folder of its own, whose conftest calls
`write_once` as the suite's does; the run is told it has workers by a fake (a plugin setting
`numprocesses`, as `-n 2` would), so no worker is started.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

CONFTEST = """
import sys
from pathlib import Path
import pytest
sys.path.insert(0, {tests!r})
from rewritten import write_once

@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    config.option.numprocesses = 2  # a fake: as -n 2's controller sees it, none started
    write_once(config, Path(__file__).parent)
"""
FAILING = "def test_x():\n    a = [1, 2]\n    assert a == [1, {n}]\n"


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A pytest over `folder`, without this venv's Hypothesis plugin (its import was ~0.6 s
    of CPU, three quarters of each run; no test here uses it) nor pytest-xdist."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")  # as where the suite runs
    plugins = ("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:hypothesispytest")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *plugins, *args],
        capture_output=True, text=True, cwd=folder, env=env, timeout=120,
    )  # fmt: skip


def _cached(folder: Path) -> list[str]:
    cache = folder / "__pycache__"
    return sorted(
        p.name for p in cache.iterdir() if "pytest" in p.name and p.name.startswith("test_")
    )


def test_the_rewritten_code_is_written_once_and_read_with_its_messages(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST.format(tests=str(ROOT / "tests")))
    (tmp_path / "test_a.py").write_text(FAILING.format(n=3))
    (tmp_path / "test_b.py").write_text("def test_y():\n    assert True\n")
    first = _pytest(tmp_path)
    assert first.returncode == 1, first.stdout + first.stderr
    assert "At index 1 diff: 2 != 3" in first.stdout, first.stdout  # pytest's own rewrite
    cached = _cached(tmp_path)
    assert [name.split(".")[0] for name in cached] == ["test_a", "test_b"], cached
    again = _pytest(tmp_path)  # read from that cache
    assert "At index 1 diff: 2 != 3" in again.stdout, again.stdout
    (tmp_path / "test_a.py").write_text(FAILING.format(n=4))  # edited: written again
    edited = _pytest(tmp_path)
    assert "At index 1 diff: 2 != 4" in edited.stdout, edited.stdout


def test_a_run_with_plain_asserts_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST.format(tests=str(ROOT / "tests")))
    (tmp_path / "test_a.py").write_text(FAILING.format(n=3))
    plain = _pytest(tmp_path, "--assert=plain")
    assert plain.returncode == 1, plain.stdout + plain.stderr
    assert not (tmp_path / "__pycache__").exists() or _cached(tmp_path) == []
