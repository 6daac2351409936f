"""review40d: the disk40 and judged40 merges, read again. Each test names what was wrong;
real parts only (the CLI in a subprocess, real SQLite files, the C compiler, a tmpfs
mounted in a mount namespace of the command's own, skipped where none can be); the noting
test's runs forked from a server that imported the CLI (`tests/forked_cli.py`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from big_bundle import build_big
from conftest import ROOT, Warm
from forked_cli import ForkedWarm
from full_disk import in_private_mount, one_line


@pytest.fixture(scope="module")
def big(made: tuple[Warm, Path], tmp_path_factory: pytest.TempPathFactory) -> tuple[Warm, Path]:
    """A bundle large enough that `warm verify`'s sort spills to SQLite's temporary files:
    10,000 kernels and 100 tunes written with SQL (`build_big`: it spills from 5,000
    kernels here, not at 2,000; a `warm run` compiled 2,000 host kernels to this end)."""
    bundle = build_big(tmp_path_factory.mktemp("big") / "big.warm", 10_000, 100)
    return Warm(dict(made[0].env)), bundle


def _verify_with_full(warm: Warm, bundle: Path, full: Path, env: dict[str, str]) -> str:
    """`warm verify bundle` with a filled 64 KiB tmpfs mounted at `full`; its one line."""
    verify = f"{sys.executable} -m warmcli verify {bundle} -q"
    script = (
        f"mount -t tmpfs -o size=64k tmpfs {full} || exit 99; "
        f"head -c 65536 /dev/zero > {full}/filler 2>/dev/null; {verify}"
    )
    base = {k: v for k, v in warm.env.items() if k not in ("TMPDIR", "SQLITE_TMPDIR")}
    return one_line(in_private_mount(script, dict(base, **env), timeout=120))


def test_a_full_var_tmp_is_named_where_sqlite_sorts_there(big: tuple[Warm, Path]) -> None:
    """With TMPDIR unset SQLite keeps its temporary files in /var/tmp (its own list:
    SQLITE_TMPDIR, TMPDIR, /var/tmp, /usr/tmp, /tmp, .), not in /tmp, Python's first
    choice. A full /var/tmp was said as the bundle's disk being full ("the disk is full:
    nothing was written"), which had room: warm looked at /tmp, which had room too."""
    if not os.path.isdir("/var/tmp"):
        pytest.skip("no /var/tmp")
    line = _verify_with_full(*big, Path("/var/tmp"), {})
    assert "the disk is full where SQLite keeps its temporary files (/var/tmp" in line, line


def test_a_full_sqlite_tmpdir_is_named_with_its_own_variable(
    big: tuple[Warm, Path], tmp_path: Path
) -> None:
    """SQLITE_TMPDIR comes before TMPDIR for SQLite: one naming a full folder was said as
    the bundle's disk being full; it is named, and the variable to change is SQLITE_TMPDIR
    (setting TMPDIR would change nothing)."""
    full = tmp_path / "full"
    full.mkdir()
    line = _verify_with_full(*big, full, {"SQLITE_TMPDIR": str(full), "TMPDIR": str(tmp_path)})
    assert f"the disk is full where SQLite keeps its temporary files ({full}" in line, line
    assert "set SQLITE_TMPDIR to a folder with room" in line, line


FORKED = """
import json, os, sys
import numpy as np, warmcli
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from w import T
rt = warmcli.runtime()
y, x = rt.buffer(64), rt.upload(np.zeros(64, np.float32))
rt.tune(T, y, x, 64)  # on zeros: the parent's note
pid = os.fork()
if pid == 0:  # the child's own tune miss, on real data: told apart
    rng = np.random.default_rng(3)
    y = rt.upload(rng.standard_normal(32, np.float32))
    rt.tune(T, y, rt.upload(rng.standard_normal(32, np.float32)), 32)
    report = warmcli.report()
    print(json.dumps({"child": report.notes, "misses": len(report.misses)}), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print(json.dumps({"parent": warmcli.report().notes}))
"""


def test_a_forked_childs_report_names_no_note_of_its_parents(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A forked child's report leaves out what its parent missed before the fork, but its
    `notes` listed the parent's: a child whose own tune miss was measured on real data
    reported "its check could not tell candidates apart" of the parent's tune. Its notes
    are now its own, as its misses are; the parent's report keeps its note."""
    from test_judged40 import WARNING, WORKLOAD

    (tmp_path / "w.py").write_text(WORKLOAD)
    script = tmp_path / "forks.py"
    script.write_text(FORKED)
    env = dict(made[0].env, CHECK="ref", DATA="zeros")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    child, parent = (json.loads(line) for line in done.stdout.splitlines())
    assert child["misses"] == 1, child  # its own tune, not the parent's
    assert child["child"] == [], child
    assert len(parent["parent"]) == 1 and WARNING in parent["parent"][0], parent


WAITER = """
import sys, time
from pathlib import Path
from warmcli.bundle.lock import write_lock
with write_lock(Path(sys.argv[1])):
    print("in", flush=True)
    time.sleep(3)
"""


def _blocked_on_flock(pid: int, seconds: float = 20) -> None:
    """Wait until `pid` waits on a `flock` (`/proc/locks` shows it as `->`)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        locks = Path("/proc/locks").read_text()
        if any("->" in line and f" {pid} " in line for line in locks.splitlines()):
            return
        time.sleep(0.02)
    pytest.fail(f"{pid} never waited on the lock")


def test_a_lock_file_removed_while_a_writer_waits_is_never_held_twice(tmp_path: Path) -> None:
    """`remove_new` (a first run's bundle the disk would not make; since disk40 a production
    write-back's too) unlinks `<bundle>.lock` once it lets go of it. A writer waiting on that
    file then took the lock of a file no longer there, and the next writer made a new lock
    file and took it at once: two writers of one bundle. A lock taken is now checked to be
    the lock file's name still; one removed meanwhile is taken again."""
    from warmcli.bundle.lock import waiting_at_most, write_lock
    from warmcli.bundle.replacing import remove_new
    from warmcli.errors import BundleError

    if not Path("/proc/locks").exists():
        pytest.skip("no /proc/locks to see a waiter by")
    bundle = tmp_path / "new.warm"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    with write_lock(bundle):  # as `remove_new`'s own hold: a writer waits meanwhile
        waiter = subprocess.Popen(
            [sys.executable, "-c", WAITER, str(bundle)], stdout=subprocess.PIPE, text=True,
            env=env,
        )  # fmt: skip
        _blocked_on_flock(waiter.pid)
        remove_new(bundle)  # the bundle not there: its lock file goes
    try:
        assert waiter.stdout is not None and waiter.stdout.readline() == "in\n"
        with waiting_at_most(0.5), pytest.raises(BundleError, match="another writer held"):
            with write_lock(bundle):
                pass
    finally:
        waiter.kill()
        waiter.wait()


FILL = """
import os, numpy as np
from warmcli import Kernel, Tunable
SRC = '''
void fill(float *y, const float *x, float v, int n) {
    for (volatile int k = 0; k < SPIN; k++) ;
    for (int i = 0; i < n; i++) y[i] = v + SUM * x[0] * SCALE;
}'''
def launch(rt, k, y, x, v, n, *, stream=None):
    rt.launch(k, y, x, v, n, stream=stream)
SUM = os.environ["SUM"]  # 1: y[i] = v + x[0] (one value from real data), 0: a fill of v
T = Tunable("fill", {
    "ref": Kernel(SRC, "fill", "PPfi", defines={"SPIN": 1000, "SCALE": "1.0f", "SUM": SUM}),
    "wrong": Kernel(SRC, "fill", "PPfi", defines={"SPIN": 0, "SCALE": "1.5f", "SUM": SUM}),
}, launch, check="ref")
DEVICE = "host"
def workload(rt):
    rng = np.random.default_rng(1)
    y = rt.upload(rng.standard_normal(64, np.float32))
    data = rng.standard_normal(64, np.float32) + 2  # (never 0)
    x = rt.upload(data if os.environ["X"] == "random" else np.zeros(64, np.float32))
    return rt.tune(T, y, x, np.float32(float(os.environ["V"])), 64)
"""


@pytest.mark.parametrize(
    ("env", "noted"),
    [
        ({"SUM": "0", "X": "random", "V": "3"}, False),  # a fill of 3.0 (x unread)
        ({"SUM": "1", "X": "random", "V": "0"}, False),  # one value, x[0], from data
        ({"SUM": "1", "X": "0", "V": "0"}, True),  # zeros in, zeros out: the wrong one passes
        ({"SUM": "1", "X": "0", "V": "1"}, True),  # zeros in, 1.0 out: likewise
    ],
    ids=["fill", "one-value-from-data", "zeros", "zeros-plus-one"],
)
def test_one_value_out_is_noted_only_where_what_went_in_told_nothing(
    made: tuple[Warm, Path],
    tmp_path: Path,
    env: dict[str, str],
    noted: bool,
    forking_servers: Any,
) -> None:
    """judged40 noted every check whose outputs held one value throughout as judging
    nothing ("warm it on inputs that tell them apart (random data)"): a tuned fill of 3.0
    over random data was noted, and an output of one value computed from the data (x[0],
    where the wrong candidate made 1.5 x[0] and was excluded), advice no data could follow.
    One value out is noted where it is 0 or the other buffers read held one value each
    (zeros in: a wrong candidate makes the same value), as before; a left-as-it-was still."""
    from test_judged40 import WARNING

    script = tmp_path / "fill.py"  # the case's variables set by its first line, not in warm's
    script.write_text(f"import os; os.environ.update({env!r})\n" + FILL)  # (one server: forked)
    warm = ForkedWarm(Warm(dict(made[0].env)), forking_servers)
    done = warm("run", script, "-b", tmp_path / "f.warm", "--json")
    assert done.returncode == 0, done.stderr
    notes = [n for p in json.loads(done.stdout)["passes"] for n in p["notes"] if WARNING in n]
    assert bool(notes) is noted, notes


KEPT = """
import sqlite3, sys
from types import SimpleNamespace
from warmcli.bundle.file import _sqlite_errors
from warmcli.errors import BundleError
from warmcli.warming.sealing import kept_before
try:
    with _sqlite_errors(sys.argv[1]):
        raise sqlite3.OperationalError("database or disk is full")
except BundleError as exc:
    bundle = SimpleNamespace(path=sys.argv[1])
    print(kept_before(exc, bundle, SimpleNamespace(stored_kernels=2, stored_tunes=1)))
"""


def test_a_store_after_others_says_the_full_temporary_folder_it_met(tmp_path: Path) -> None:
    """A run's later store (or its record, its signature) the disk refused says what the
    earlier ones kept, with the refusal's words: it took `disk_refusal`, which named
    "the disk is full" alone, so a full SQLITE_TMPDIR was said as the bundle's disk, the
    folder and what to do dropped. The refusal's own words are kept whole."""
    full = tmp_path / "full"
    full.mkdir()
    script = (
        f"mount -t tmpfs -o size=64k tmpfs {full} || exit 99; "
        f"head -c 65536 /dev/zero > {full}/filler 2>/dev/null; "
        f"{sys.executable} -c '{KEPT}' {tmp_path / 'b.warm'}"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), SQLITE_TMPDIR=str(full))
    proc = in_private_mount(script, env, timeout=60, cwd=None)
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    assert "stored 2 kernel(s) and 1 tune(s) (kept), but the disk is full where SQLite" in line
    assert f"({full}: set SQLITE_TMPDIR to a folder with room): the rest is not stored" in line
