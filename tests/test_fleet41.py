"""Fleet trial 41: a paused writer, two runs at once on one bundle, a bundle moved beside a
journal. Real processes, real SQLite files, real signals, the real C compiler."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

WORKLOAD = """
import os
from warmcli import Kernel

DEVICE = "host"
SRC = "void fill(double *o, int n) { for (int i = 0; i < n; i++) o[i] = (double)i / (DIV) + 0.5; }"
XSRC = "void extra(double *o, int n) { for (int i = 0; i < n; i++) o[i] = i * (DIV) - 0.25; }"


def workload(rt):
    import time
    if os.environ.get("MEET"):  # both jobs open the bundle first: each waits for the other
        open(os.path.join(os.environ["MEET"], os.environ["DIVS"]), "w").close()
        waited = time.monotonic() + 120
        while len(os.listdir(os.environ["MEET"])) < 2 and time.monotonic() < waited:
            time.sleep(0.01)
    outs = []
    for d in os.environ.get("DIVS", "3").split(","):
        o = rt.buffer(17, "float64")
        entry, src, d = ("extra", XSRC, d[1:]) if d[0] == "x" else ("fill", SRC, d)
        rt.launch(Kernel(src, entry, "Pi", defines={"DIV": d}), o, 17)
        outs.append(o)
    return outs
"""

# A production process: the bundle's lock wait shortened (its module's constant, the one
# bound every reader and writer waits by) so the test need not wait the 60 s it is.
SERVE = """
import hashlib, sys, time
import warmcli.bundle.file as bundle_file
bundle_file.LOCK_WAIT_SECONDS = float(sys.argv[2])
sys.path.insert(0, sys.argv[3])
import warmcli, work
start = time.monotonic()
if len(sys.argv) > 4:  # (a test timing from this start: told so)
    open(sys.argv[4], "w").close()
if sys.argv[1] != "-":
    warmcli.use_bundle(sys.argv[1])
rt = warmcli.runtime("host")
h = hashlib.sha256()
for o in work.workload(rt):
    h.update(rt.read(o).tobytes())
r = warmcli.report()
print(h.hexdigest(), len(r.kernels), round(time.monotonic() - start, 1))
"""

# A writer that takes SQLite's exclusive lock and writes a page (its journal beside the
# bundle, header and all), as a write-back or a run committing does, and then stops there.
HOLD = """
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN EXCLUSIVE")
c.execute("UPDATE manifest SET value = value || ' ' WHERE key = 'updated'")
print("held", flush=True)
time.sleep(float(sys.argv[2]))  # (stopped meanwhile), then its transaction ends
c.execute("ROLLBACK")
"""


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    return dict(env, PYTHONPATH=str(ROOT), WARM_HOME=str(tmp / "home"))


def _warm(tmp: Path, *args: str | Path, **extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [PY, "-m", "warmcli", *map(str, args)]
    env = dict(_env(tmp), **extra)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def warmed_once(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`work.py` and `b.warm`, its bundle (DIVS=3), warmed once for the module's tests."""
    tmp = tmp_path_factory.mktemp("fleet41")
    (tmp / "work.py").write_text(WORKLOAD)
    assert _warm(tmp, "run", tmp / "work.py", "-b", tmp / "b.warm", "-q").returncode == 0
    return tmp


@pytest.fixture
def warmed(tmp_path: Path, warmed_once: Path) -> Path:
    """`warmed_once`'s bundle and workload, a copy of each in `tmp_path` (each test writes to
    its bundle, or stops a writer on it): as `warm run work.py -b b.warm -q` there leaves
    them."""
    shutil.copyfile(warmed_once / "work.py", tmp_path / "work.py")
    shutil.copyfile(warmed_once / "b.warm", tmp_path / "b.warm")
    return tmp_path / "b.warm"


@pytest.fixture(scope="module")
def cold(warmed_once: Path) -> Callable[[str], str]:
    """`cold(divs)`: the digest a production process computes with no bundle for `DIVS=divs`
    (compiling every kernel), started once a `divs` for the module: every test compares its
    served digests with the same cold ones."""
    digests: dict[str, str] = {}

    def digest(divs: str) -> str:
        if divs not in digests:
            run = _serve(warmed_once, Path("-"), 60.0, WARM_BUNDLE="", DIVS=divs)
            assert run[1] == str(len(divs.split(","))), run  # each kernel compiled: cold
            digests[divs] = run[0]
        return digests[divs]

    return digest


def _serve(
    tmp: Path, bundle: Path, wait: float, started: Path | None = None, **extra: str
) -> list[str]:
    run = subprocess.run(
        [PY, "-c", SERVE, str(bundle), str(wait), str(tmp), *([str(started)] if started else [])],
        env=dict(_env(tmp), **extra),
        capture_output=True,
        text=True,
        timeout=25,
    )
    assert run.returncode == 0, run.stderr
    return [*run.stdout.split(), run.stderr]


def _stopped_writer(bundle: Path, hold: float) -> subprocess.Popen[str]:
    cmd = [PY, "-c", HOLD, str(bundle), str(hold)]
    writer = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    assert writer.stdout is not None and writer.stdout.readline() == "held\n"
    assert Path(f"{bundle}-journal").stat().st_size > 0
    writer.send_signal(signal.SIGSTOP)
    return writer


def test_a_paused_writer_delays_a_new_reader_which_then_serves_everything(
    tmp_path: Path, warmed: Path, cold: Callable[[str], str]
) -> None:
    writer = _stopped_writer(warmed, 0.5)
    try:
        # its writer resumes 2 s after the reader's start (not the resumer's: under load a
        # reader took more than 0.5 s to start), and ends later
        started = tmp_path / "started"
        resume = (
            f"import os, pathlib, signal, time\nwhile not pathlib.Path({str(started)!r}).exists():"
            f"\n    time.sleep(0.01)\ntime.sleep(2); os.kill({writer.pid}, signal.SIGCONT)"
        )
        resumer = subprocess.Popen([PY, "-c", resume])
        served = _serve(tmp_path, warmed, 60.0, started=started)
        resumer.wait()
    finally:
        writer.kill()
        writer.wait()
    assert served[0] == cold("3") and served[1] == "0", served  # waited, then served all
    assert 1.5 <= float(served[2]) < 20


def test_a_writer_stopped_for_good_costs_a_new_reader_one_bound_then_it_runs_cold(
    tmp_path: Path, warmed: Path, cold: Callable[[str], str]
) -> None:
    writer = _stopped_writer(warmed, 600)
    try:
        served = _serve(tmp_path, warmed, 2.0)
        stats = subprocess.run(
            [PY, "-c", STATS, str(warmed), "1.0"],
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=25,
        )
    finally:
        writer.kill()
        writer.wait()
    digest, compiled, seconds, err = served
    assert digest == cold("3") and compiled == "1", served  # cold, computing the same
    assert 1.5 <= float(seconds) < 10, served
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "locked by another process" in lines[0], err
    assert "not loaded" in lines[0] and "Traceback" not in err
    assert stats.returncode == 2 and stats.stdout == "", stats
    assert len(stats.stderr.strip().splitlines()) == 1, stats.stderr
    assert "locked by another process" in stats.stderr
    # nothing lost: the writer's journal rolled back, the bundle serves all again
    again = _serve(tmp_path, warmed, 60.0)
    assert again[0] == cold("3") and again[1] == "0", again


# `warm stats B`, the lock wait shortened as in SERVE.
STATS = """
import runpy, sys
import warmcli.bundle.file as bundle_file
bundle_file.LOCK_WAIT_SECONDS = float(sys.argv.pop())
sys.argv[0:1] = ["warm", "stats"]
runpy.run_module("warmcli", run_name="__main__")
"""


def _kernel_rows(bundle: Path) -> list[tuple[str, str]]:
    import sqlite3

    with contextlib.closing(sqlite3.connect(bundle)) as conn:
        rows = conn.execute("SELECT label, sha256 FROM kernels ORDER BY label").fetchall()
        blobs = {r[0] for r in conn.execute("SELECT sha256 FROM blobs")}
    assert blobs == {sha for _, sha in rows}, "a blob no kernel uses, or a kernel without one"
    return rows


def _two_jobs_at_once(tmp: Path, bundle: Path, *key: str) -> list[int]:
    # one compiler process (-j1): each job's kernels share one batch binary
    cmd = [PY, "-m", "warmcli", "run", str(tmp / "work.py"), "-b", str(bundle), "--json", "-j1"]
    cmd += key
    (tmp / "meet").mkdir()  # (each job's workload, opened, waits there for the other's)
    env = dict(_env(tmp), MEET=str(tmp / "meet"))
    jobs = [
        subprocess.Popen(cmd, env=dict(env, DIVS=divs), stdout=subprocess.PIPE, text=True)
        for divs in ("4,x5", "4,x7")
    ]
    outs = [job.communicate(timeout=120)[0] for job in jobs]
    assert [job.returncode for job in jobs] == [0, 0], outs
    return [json.loads(out)["stored"]["kernels"] for out in outs]


def test_two_runs_at_once_keep_the_first_jobs_row_and_count_it_once(
    tmp_path: Path, warmed: Path, cold: Callable[[str], str]
) -> None:
    before = _kernel_rows(warmed)
    stored = _two_jobs_at_once(tmp_path, warmed)
    rows = _kernel_rows(warmed)
    assert len(rows) == len(before) + 3, rows  # fill[DIV=4], extra[DIV=5], extra[DIV=7] added
    assert sorted(stored) == [1, 2], stored  # the second job stored only its own kernel
    by_label = dict(rows)
    shared = by_label["fill[DIV=4]"]
    first = "extra[DIV=5]" if stored[0] == 2 else "extra[DIV=7]"
    assert shared == by_label[first], rows  # the first job's row (its batch's binary) kept
    for divs in ("4,x5", "4,x7"):  # and every row serves, computing what a cold process does
        served = _serve(tmp_path, warmed, 60.0, DIVS=divs)
        assert served[:2] == [cold(divs), "0"], served


def test_two_signing_runs_at_once_each_store_and_sign_their_own_build(
    tmp_path: Path, warmed: Path, cold: Callable[[str], str]
) -> None:
    assert _warm(tmp_path, "keygen", tmp_path / "ci.key").returncode == 0
    before = _kernel_rows(warmed)
    stored = _two_jobs_at_once(tmp_path, warmed, "--key", str(tmp_path / "ci.key"))
    rows = _kernel_rows(warmed)  # (no blob left that no row uses)
    assert len(rows) == len(before) + 3, rows
    assert stored == [2, 2], stored  # each stored its own build of fill[DIV=4]: counted
    by_label = dict(rows)
    assert by_label["fill[DIV=4]"] in (by_label["extra[DIV=5]"], by_label["extra[DIV=7]"])
    trusted = str(tmp_path / "ci.key.pub")
    for divs in ("4,x5", "4,x7"):  # every row signed and served under the key
        served = _serve(tmp_path, warmed, 60.0, DIVS=divs, WARM_TRUSTED_KEYS=trusted)
        assert served[:2] == [cold(divs), "0"], served


# A writer killed in the middle of its write, its journal left hot (synchronous off: the
# journal's header is whole, and page 1 in it, from its first page written).
KILLED = """
import os, signal, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA synchronous = OFF")
c.execute("BEGIN IMMEDIATE")
c.execute("PRAGMA application_id = 1413829197")  # (page 1 written: as the counter's update)
c.execute("INSERT OR REPLACE INTO manifest VALUES ('x', ?)", ("y" * 40000,))
os.kill(os.getpid(), signal.SIGKILL)
"""


def _counter(path: Path) -> int:
    return int.from_bytes(path.read_bytes()[24:28], "big")


def test_a_bundle_moved_in_beside_another_files_hot_journal_is_refused_not_replayed(
    tmp_path: Path, warmed: Path, cold: Callable[[str], str]
) -> None:
    import sqlite3

    other = tmp_path / "other.warm"
    assert _warm(tmp_path, "run", tmp_path / "work.py", "-b", other, "-q", DIVS="6").returncode == 0
    for n in range(_counter(other) + 3):  # its own history: (write-backs, say) further on
        with contextlib.closing(sqlite3.connect(warmed, isolation_level=None)) as conn:
            conn.execute("INSERT OR REPLACE INTO manifest VALUES ('n', ?)", (str(n),))
    killed = subprocess.run([PY, "-c", KILLED, str(warmed)], timeout=30)
    assert killed.returncode == -signal.SIGKILL
    journal = Path(f"{warmed}-journal")
    assert journal.read_bytes()[:8] == bytes.fromhex("d9d505f920a163d7")  # hot
    # its own file beside it: rolled back, served
    own = tmp_path / "own.warm"
    own.write_bytes(warmed.read_bytes())
    Path(f"{own}-journal").write_bytes(journal.read_bytes())
    assert _warm(tmp_path, "stats", own).returncode == 0
    assert not Path(f"{own}-journal").exists()
    # another bundle moved in over it: never played into it
    moved = other.read_bytes()
    os.replace(other, warmed)
    stats = _warm(tmp_path, "stats", warmed)
    assert stats.returncode == 2 and len(stats.stderr.strip().splitlines()) == 1, stats
    assert "cannot be this file's" in stats.stderr and "-journal" in stats.stderr
    assert warmed.read_bytes() == moved and journal.exists()
    journal.unlink()  # as the line says
    served = _serve(tmp_path, warmed, 60.0, DIVS="6")
    assert served[:2] == [cold("6"), "0"]


# A production process with the bundle open before a writer stops: it reads on when told.
SERVE_OPEN = SERVE.replace(
    "start = time.monotonic()\n",
    "warmcli.use_bundle(sys.argv[1])\nprint('open', flush=True)\ninput()\n"
    "start = time.monotonic()\n",
).replace('if sys.argv[1] != "-":\n    warmcli.use_bundle(sys.argv[1])\n', "")


WAIT = 8.0  # the next test's lock wait: far more than its compiles take


def test_a_serving_process_waits_for_a_stopped_writer_once_not_at_every_read(
    tmp_path: Path, warmed: Path, cold: Callable[[str], str]
) -> None:
    """Its time is one lock wait (`WAIT`) and 4 kernels compiled cold (2.1 s at a load of 20
    on 2 cores: a wait of 2 s and a bound of two left them no room); it waited at every read
    before (9 reads: 9 waits, 72 s), and two waits already pass the bound."""
    cmd = [PY, "-c", SERVE_OPEN, str(warmed), str(WAIT), str(tmp_path)]
    env = dict(_env(tmp_path), DIVS="3,5,6,7")
    reader = subprocess.Popen(
        cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert reader.stdout is not None and reader.stdout.readline() == "open\n"
    writer = _stopped_writer(warmed, 600)
    try:
        out = reader.communicate("go\n", timeout=WAIT * 9 + 60)[0].split()
    finally:
        reader.kill()
        reader.wait()
        writer.kill()
        writer.wait()
    assert out[0] == cold("3,5,6,7") and out[1] == "4", out  # cold, computing the same
    assert float(out[2]) < WAIT * 2, out  # one wait, not one per read
