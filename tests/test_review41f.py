"""Review of fleet41: a live writer's journal is never taken for another file's, real
processes, real SQLite files, the real C compiler."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

WORKLOAD = """
from warmcli import Kernel

SRC = "void fill(double *o, int n) { for (int i = 0; i < n; i++) o[i] = i / 3.0; }"


def workload(rt):
    o = rt.buffer(9, "float64")
    rt.launch(Kernel(SRC, "fill", "Pi"), o, 9)
    return [o]
"""


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    return dict(env, PYTHONPATH=str(ROOT), WARM_HOME=str(tmp / "home"))


@pytest.fixture
def warmed(tmp_path: Path) -> Path:
    (tmp_path / "work.py").write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    cmd = [PY, "-m", "warmcli", "run", tmp_path / "work.py", "-b", bundle, "-q"]
    assert subprocess.run(cmd, env=_env(tmp_path), timeout=120).returncode == 0
    return bundle


# A live writer (a write-back, a run committing): a transaction large enough that SQLite
# spills its cache (its journal synced, page 1 in it), then commits, then commits another.
WRITER = r"""
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA cache_size = 2")
c.execute("BEGIN IMMEDIATE")
c.execute("INSERT INTO manifest VALUES ('spill', ?)", ("x" * 400000,))
print("spilled", flush=True)
input()
c.execute("COMMIT")
c.execute("DELETE FROM manifest WHERE key = 'spill'")
print("committed twice", flush=True)
input()
"""

# `warm stats B`, paused (by an audit hook: warm's code unchanged) at the open of the
# bundle file that follows the judging of its journal, until told to go on.
PAUSED_STATS = r"""
import os, runpy, sys
db = os.path.realpath(sys.argv[1])
def pause(event, args):
    if event == "open" and args[0] == db and isinstance(args[2], int) and args[2] & os.O_NOCTTY:
        print("paused", flush=True)
        sys.stdin.readline()
sys.addaudithook(pause)
sys.argv = ["warm", "stats", sys.argv[1]]
runpy.run_module("warmcli", run_name="__main__")
"""


def test_a_live_writers_journal_deleted_by_its_commit_is_not_refused_as_another_files(
    tmp_path: Path, warmed: Path
) -> None:
    """The journal judged, the writer commits (journal deleted) and commits again (the
    file's counter two on): the deleted journal's page 1, still read through the open
    descriptor, is not another file's. Was refused ('cannot be this file's ...; remove it',
    advice that, followed while a writer is live, corrupts the bundle), and WARM_BUNDLE's
    open raised it into the user's program."""
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    writer = subprocess.Popen([PY, "-c", WRITER, str(warmed)], **pipes)  # type: ignore[call-overload]
    try:
        assert writer.stdout.readline() == "spilled\n"
        assert Path(f"{warmed}-journal").read_bytes()[:8] == bytes.fromhex("d9d505f920a163d7")
        cmd = [PY, "-c", PAUSED_STATS, str(warmed)]
        stats = subprocess.Popen(cmd, env=_env(tmp_path), stderr=subprocess.PIPE, **pipes)  # type: ignore[call-overload]
        try:
            assert stats.stdout.readline() == "paused\n"
            writer.stdin.write("\n")
            writer.stdin.flush()
            assert writer.stdout.readline() == "committed twice\n"
            out, err = stats.communicate("\n" * 8, timeout=60)
        finally:
            stats.kill()
            stats.wait()
    finally:
        writer.kill()
        writer.wait()
    assert stats.returncode == 0 and "Traceback" not in err, err
    assert "cannot be this file's" not in err and "kernels" in out.lower(), (out, err)
