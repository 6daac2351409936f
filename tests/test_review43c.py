"""Holes review43c found in hostile43's merge, each reproduced for real: the real CLI in a
subprocess, real thread pools, real SQLite files."""

from __future__ import annotations

import contextlib
import gc
import sqlite3
import subprocess
import sys
import weakref
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from subprocess import PIPE

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# A host holding a bracket other than around an IPv6 address alone: `urlsplit` reads each as
# `::1` (or the bracket's text), `http.client` looks the name up as it is.
MALFORMED = ("[::1]x.invalid", "x.invalid[::1]", "[::1]]", "[v1.x]", "%5B::1%5Dx")


@pytest.mark.parametrize("host", MALFORMED)
def test_a_url_whose_bracketed_host_is_malformed_is_refused_in_one_line(
    warm: Warm, tmp_path: Path, host: str
) -> None:
    """`https://u:pw@[::1]x.invalid/b.warm` was taken as naming ::1 by every check (the proxy
    one: no proxy for this machine) and connected to the name `[::1]x.invalid` (a DNS lookup,
    past the proxy the environment names). Refused now before anything is looked up."""
    proc = warm("pull", f"https://u:s3cr3t@{host}:8443/b.warm", tmp_path / "b.warm")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "malformed" in lines[0] and "s3cr3t" not in lines[0], lines
    assert not (tmp_path / "b.warm").exists()


def test_a_redirect_to_a_malformed_bracketed_host_is_refused_credentials_never_follow() -> None:
    """A redirect from `https://[::1]/` to `https://[::1]evil/` was followed, and judged the
    same origin (`_origin` read both hosts as `::1`): the Authorization went along to the
    name `[::1]evil` (pure logic: `redirect_refused` and `_origin`, as `urlopen` calls them)."""
    from warmcli.bundle import http_open

    for to in ("https://[::1]evil/b.warm", "https://evil[::1]/b.warm", "https://[::1]]:443/b"):
        why = http_open.redirect_refused("https://[::1]/b.warm", to)
        assert why is not None and "malformed" in why, (to, why)
        with pytest.raises(ValueError):
            http_open._origin(to)
    assert http_open.redirect_refused("https://[::1]/a", "https://[::1]:443/b") is None
    assert http_open._origin("https://[::1]/a") == http_open._origin("https://[::1]:443/b")
    assert http_open._origin("https://X.example/a") == ("https", "x.example", 443)


class _Big:
    """Stands for a large array in a frame's locals (its liveness seen by a weak reference)."""


def test_noted_errors_of_a_pool_task_that_went_on_are_not_kept() -> None:
    """`pool_tasks._NOTED` kept every noted error (its traceback: each frame's locals) and its
    future (its result) until the pass ended: a task noting 2,000 errors, each raised where a
    large array lived, kept all 2,000 arrays alive. Now none is held once the task ended."""
    from warmcli.pool_tasks import ended_by_refused, note_refused

    ended_by_refused()  # a pass of its own
    alive: list[weakref.ref[_Big]] = []

    def deep(i: int) -> None:
        big = _Big()
        alive.append(weakref.ref(big))
        raise note_refused(RuntimeError(f"needs a GPU {i}"))

    def task() -> int:
        for i in range(2000):
            with contextlib.suppress(RuntimeError):  # caught: the task goes on
                deep(i)
        return 1

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(task) for _ in range(2)]  # kept, as a workload does
    gc.collect()
    assert sum(ref() is not None for ref in alive) == 0
    assert ended_by_refused() is None and [f.result() for f in futures] == [1, 1]


def test_a_pool_task_ended_by_its_noted_error_is_still_found_its_future_dropped() -> None:
    from warmcli.pool_tasks import ended_by_refused, note_refused

    ended_by_refused()

    def task(i: int) -> None:
        if i == 3:
            raise note_refused(RuntimeError("needs a GPU"))
        try:
            raise note_refused(RuntimeError("caught"))
        except RuntimeError:
            pass

    with ThreadPoolExecutor(2) as pool:
        for i in range(6):
            pool.submit(task, i)  # never read
    gc.collect()
    found = ended_by_refused()
    assert isinstance(found, RuntimeError) and str(found) == "needs a GPU"
    assert found.__traceback__ is not None  # where it rose: said in the run's error
    assert ended_by_refused() is None  # forgotten


def _full_write(path: Path, many: bool) -> sqlite3.Connection:
    """A `Waiting` connection (as `file._connect` makes one) whose write transaction SQLite
    rolled back by itself: the disk full (`max_page_count`), SQLITE_FULL."""
    from warmcli.bundle.waiting import SLICE_SECONDS, Waiting

    conn = sqlite3.connect(path, timeout=SLICE_SECONDS, isolation_level=None, factory=Waiting)
    conn.execute("CREATE TABLE t (x BLOB)")
    conn.execute("PRAGMA max_page_count = 20")
    conn.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError, match="full"):
        if many:
            conn.executemany("INSERT INTO t VALUES (zeroblob(?))", [(200_000,)])
        else:
            conn.execute("INSERT INTO t VALUES (zeroblob(200000))")
    assert not conn.in_transaction  # ended by SQLite, never by a ROLLBACK warm ran
    return conn


@pytest.mark.parametrize("many", [False, True])
def test_a_write_sqlite_rolled_back_by_itself_leaves_reads_waiting_a_slice_in_c(
    tmp_path: Path, many: bool
) -> None:
    """`BEGIN IMMEDIATE` sets busy_timeout 0 and only an executed COMMIT or ROLLBACK set it
    back: a transaction SQLite ended itself (disk full, an I/O error, an interrupt) left the
    connection waiting for nothing in C, each later read's wait for a writer polled by
    Python once a slice. The next statement (or blob) finds its slice again."""
    conn = _full_write(tmp_path / "b.warm", many)
    assert conn.execute("PRAGMA busy_timeout").fetchone() == (50,)
    conn.close()


def test_a_default_bundle_locked_at_open_is_tried_again_as_a_named_one_is(
    warm: Warm, tmp_path: Path
) -> None:
    """The default bundle (`warm run` without --bundle; no WARM_BUNDLE) found locked past the
    wait at a process's open was 'not loaded' like a broken one, and never tried again: the
    process ran cold to its end, though the README says a locked bundle is no broken one
    and is served once free. Tried again now, as a named one is (`Reopening`)."""
    from test_leftovers42a import FILLS, HOLD
    from test_review42a import LATE_OPEN, ROOT

    (tmp_path / "fills.py").write_text(FILLS)
    proc = warm("run", "-q", tmp_path / "fills.py")  # the default bundle
    assert proc.returncode == 0, proc.stderr
    default = Path(warm.env["WARM_HOME"]) / "bundle.warm"
    assert default.is_file()
    (tmp_path / "elsewhere").mkdir()
    env = dict(warm.env, PYTHONPATH=str(ROOT), WARM_REPORT="")
    run = [sys.executable, "-c"]
    holder = subprocess.Popen([*run, HOLD, str(default)], stdin=PIPE, stdout=PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        server = subprocess.Popen(
            [*run, LATE_OPEN, str(tmp_path / "elsewhere")],
            cwd=tmp_path,
            env=env,
            stdin=PIPE,
            stdout=PIPE,
            stderr=PIPE,
            text=True,
        )
        assert server.stdout is not None
        first = server.stdout.readline()
        holder.communicate("\n", timeout=10)  # its commit ends
        out, err = server.communicate("\n", timeout=30)
    finally:
        holder.kill()
    assert server.returncode == 0, err
    assert first.startswith(f"warm: bundle {default} not loaded yet: another process held"), (
        first,
        err,
    )
    assert "this process runs cold" in err and "locked" in err, err
    assert out.startswith(f"warm: bundle {default} lacked 1 kernel(s)"), out


def test_a_task_noting_again_in_a_later_pass_is_of_that_pass() -> None:
    """A pool task running on past its pass's end that notes (and ends by) an error in the
    next pass is that pass's failure, as a note made then always was."""
    import threading

    from warmcli.pool_tasks import ended_by_refused, note_refused

    ended_by_refused()
    go_on, noted_once = threading.Event(), threading.Event()

    def task() -> None:
        with contextlib.suppress(RuntimeError):
            raise note_refused(RuntimeError("caught in the first pass"))
        noted_once.set()
        go_on.wait(10)
        raise note_refused(RuntimeError("ends it in the second"))

    with ThreadPoolExecutor(1) as pool:
        pool.submit(task)
        assert noted_once.wait(10)
        assert ended_by_refused() is None  # the first pass ends: the task still runs
        go_on.set()
    found = ended_by_refused()
    assert isinstance(found, RuntimeError) and str(found) == "ends it in the second"
