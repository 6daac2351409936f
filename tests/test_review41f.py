"""Review of fleet41: a live writer's journal is never taken for another file's, real
processes, real SQLite files, the real C compiler."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from test_merge_files import _runs_as_nobody

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


@pytest.fixture(scope="module")
def warmed_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`work.py` and `b.warm`, its bundle, warmed once for the module's tests."""
    tmp = tmp_path_factory.mktemp("review41f")
    (tmp / "work.py").write_text(WORKLOAD)
    cmd = [PY, "-m", "warmcli", "run", tmp / "work.py", "-b", tmp / "b.warm", "-q"]
    assert subprocess.run(cmd, env=_env(tmp), timeout=120).returncode == 0
    return tmp


@pytest.fixture
def warmed(tmp_path: Path, warmed_once: Path) -> Path:
    """`warmed_once`'s workload and bundle, copied into `tmp_path` (a writer of each test's
    own holds it): as `warm run work.py -b b.warm -q` there leaves them."""
    for name in ("work.py", "b.warm"):
        shutil.copyfile(warmed_once / name, tmp_path / name)
    return tmp_path / "b.warm"


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


# A live writer that holds its transaction open (its journal beside the bundle, not hot).
HOLD = r"""
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN IMMEDIATE")
c.execute("UPDATE manifest SET value = value || ' ' WHERE key = 'updated'")
c.execute("PRAGMA cache_size = 1")
print("held", flush=True)
input()
c.execute("ROLLBACK")
"""

SERVE = """
import sys
import tempfile
sys.path.insert(0, sys.argv[1])
import warmcli, work
rt = warmcli.runtime("host")
print(rt.read(work.workload(rt)[0]).sum(), len(warmcli.report().kernels))
"""


def test_a_reader_that_may_not_write_the_folder_reads_past_a_live_writers_journal(
    tmp_path: Path, warmed: Path
) -> None:
    """A serving user who may not write the bundle's folder, started while its owner's
    writer is in a transaction: the journal is a live writer's, not hot (SQLite reads past
    it). It was taken for an interrupted write ('open the bundle once where it is writable
    to roll the write back'): warm stats exited 2, WARM_BUNDLE's open raised into the
    program. It serves now."""
    as_other: list[str] = []
    if os.geteuid() == 0:  # root may write anywhere: the reader is another user
        if not _runs_as_nobody():  # (no setpriv, or a libpython in root's folder: pyenv's)
            pytest.skip("no Python runnable as another user to read as one")
        as_other = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
        shared = Path(tempfile.mkdtemp(prefix="review41f-"))
        shared.chmod(0o755)
        shutil.copyfile(warmed, shared / "b.warm")
        shutil.copyfile(tmp_path / "work.py", shared / "work.py")
        for f in shared.iterdir():
            f.chmod(0o644)
        folder = shared
    else:
        folder = tmp_path
    bundle = folder / "b.warm"
    env = dict(_env(tmp_path), WARM_HOME=str(folder / "home-reader"), WARM_BUNDLE=str(bundle))
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    writer = subprocess.Popen([PY, "-c", HOLD, str(bundle)], **pipes)  # type: ignore[call-overload]
    try:
        assert writer.stdout.readline() == "held\n"
        assert Path(f"{bundle}-journal").stat().st_size > 0
        folder.chmod(0o555)
        run = {"env": env, "capture_output": True, "text": True, "timeout": 60}
        stats = subprocess.run([*as_other, PY, "-m", "warmcli", "stats", bundle], **run)  # type: ignore[call-overload]
        served = subprocess.run([*as_other, PY, "-c", SERVE, folder], **run)  # type: ignore[call-overload]
    finally:
        folder.chmod(0o755)
        writer.kill()
        writer.wait()
        if as_other:
            shutil.rmtree(folder)
    assert stats.returncode == 0, stats.stderr
    assert served.returncode == 0 and "Traceback" not in served.stderr, served.stderr
    assert served.stdout.split()[1] == "0", served.stdout  # every kernel served, none compiled


# Two jobs' workloads: each opens the bundle, waits (both open before either stores), builds.
TWO_JOBS = """
import os, time
from warmcli import Kernel

SRC = "void fill(double *o, int n) { for (int i = 0; i < n; i++) o[i] = i / (DIV) + 0.5; }"


def workload(rt):
    if os.environ.get("MEET"):  # each job, the bundle open, waits for the other to open it
        open(os.path.join(os.environ["MEET"], os.environ["DIVS"]), "w").close()
        waited = time.monotonic() + 120
        while len(os.listdir(os.environ["MEET"])) < 2 and time.monotonic() < waited:
            time.sleep(0.01)
    outs = []
    for d in os.environ["DIVS"].split(","):
        o = rt.buffer(9, "float64")
        rt.launch(Kernel(SRC, "fill", "Pi", defines={"DIV": d}), o, 9)
        outs.append(o)
    return outs
"""


def test_two_signing_runs_at_once_under_trusted_keys_leave_every_row_signed(
    tmp_path: Path,
) -> None:
    """Two 'warm run --key K' jobs at once on a bundle K signed, WARM_TRUSTED_KEYS=K.pub:
    each signs what K had signed when it opened and what it stored, replacing K's earlier
    signature. The second replaced the first's, made since it opened: the first job's
    kernels were left unsigned (both said 'signed', verify 'complete', exit 0), so every
    process trusting K compiled them cold. Now what K signs as stored then is kept."""
    (tmp_path / "jobs.py").write_text(TWO_JOBS)
    env = dict(_env(tmp_path), WARM_TRUSTED_KEYS=str(tmp_path / "k.pub"))
    bundle, key = tmp_path / "b.warm", tmp_path / "k"
    warm = [PY, "-m", "warmcli"]
    assert subprocess.run([*warm, "keygen", key], env=env, capture_output=True).returncode == 0
    run = [*warm, "run", tmp_path / "jobs.py", "-b", bundle, "-q", "--key", key]
    assert subprocess.run(run, env=dict(env, DIVS="3"), timeout=120).returncode == 0
    meet = str(tmp_path / "meet")  # (each job's workload, opened, waits there for the other's)
    os.mkdir(meet)
    jobs = [
        subprocess.Popen(run, env=dict(env, DIVS=divs, MEET=meet), stdout=subprocess.DEVNULL)
        for divs in ("5,6", "7,8")
    ]
    assert [job.wait(timeout=120) for job in jobs] == [0, 0]
    verify = subprocess.run(
        [*warm, "verify", bundle], env=env, capture_output=True, text=True, timeout=120
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "not signed by a trusted key" not in verify.stdout + verify.stderr


# A writer holding SQLite's exclusive lock (a long commit: a VACUUM of a big bundle) until told.
EXCLUSIVE = r"""
import sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN EXCLUSIVE")
c.execute("UPDATE manifest SET value = value || ' ' WHERE key = 'updated'")
print("held", flush=True)
input()
c.execute("ROLLBACK")
print("done", flush=True)
input()
"""

# A serving process (the lock wait shortened to 0.5 s, as test_review41i's locked read does:
# the writer holds the lock until told, so any wait is waited out; nothing here is timed),
# its bundle open: one kernel read while the lock is held, then two more once told the
# writer is done.
READ_LATER = """
import os, sys
import warmcli.bundle.file as bundle_file
bundle_file.LOCK_WAIT_SECONDS = 0.5
sys.path.insert(0, sys.argv[2])
import warmcli, jobs
warmcli.use_bundle(sys.argv[1])
rt = warmcli.runtime("host")
os.environ["DIVS"] = "3"
jobs.workload(rt)  # the bundle open, this one served
print("open", flush=True)
input()
os.environ["DIVS"] = "5"
jobs.workload(rt)
print(len(warmcli.report().kernels), flush=True)
input()
os.environ["DIVS"] = "6,7"
jobs.workload(rt)
print(len(warmcli.report().kernels), flush=True)
"""


def test_a_serving_process_serves_again_once_a_lock_it_waited_out_is_free(
    tmp_path: Path,
) -> None:
    """A lock held past the wait need not be a stopped writer: a long commit ends. The read
    that waited it out is a miss (cold); later ones were all misses for the process's life,
    never looked at again. Now a later read asks, without waiting, whether the lock is free:
    the kernels read once the writer is done are served."""
    (tmp_path / "jobs.py").write_text(TWO_JOBS)
    env = _env(tmp_path)
    bundle = tmp_path / "b.warm"
    run = [PY, "-m", "warmcli", "run", tmp_path / "jobs.py", "-b", bundle, "-q"]
    for divs in ("3", "5", "6", "7"):  # one run each: each kernel's binary its own, read lazily
        assert subprocess.run(run, env=dict(env, DIVS=divs), timeout=120).returncode == 0
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    cmd = [PY, "-c", READ_LATER, str(bundle), str(tmp_path)]
    reader = subprocess.Popen(cmd, env=env, **pipes)  # type: ignore[call-overload]
    writer = None
    try:
        assert reader.stdout.readline() == "open\n"
        writer = subprocess.Popen([PY, "-c", EXCLUSIVE, str(bundle)], **pipes)  # type: ignore[call-overload]
        assert writer.stdout.readline() == "held\n"
        reader.stdin.write("\n")
        reader.stdin.flush()
        assert reader.stdout.readline() == "1\n"  # waited out: that one kernel compiled cold
        writer.stdin.write("\n")
        writer.stdin.flush()
        assert writer.stdout.readline() == "done\n"
        later = reader.communicate("\n", timeout=60)[0]
    finally:
        for process in (reader, writer):
            if process is not None:
                process.kill()
                process.wait()
    assert later == "1\n", later  # the two read after: served, none compiled
