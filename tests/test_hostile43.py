"""Holes hostile43 found in what stop 42 added, each reproduced for real: the real CLI in a
subprocess (forked, `tests/forked_cli.py`, but the one signalled, started), real servers on
127.0.0.1, real SQLite files."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# `urlsplit` reads `[::1]x.invalid` as the host `::1` (this machine: plain http:// taken),
# but `http.client` connects to the name `[::1]x.invalid` as it is, which a DNS server (or
# /etc/hosts) may give any address: a plain-http download, and its credentials, went there.
TWO_WAYS = ("[::1]x.invalid", "x.invalid[::1]", "[::1]]")


@pytest.fixture
def redirecting() -> Iterator[list[str]]:
    """A plain http:// server on 127.0.0.1 whose every answer (but a HEAD's: 404) redirects
    to the URL in the list it gives (its first item; where it is a path, that file is
    served instead), the paths it took appended to it."""
    where: list[str] = [""]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            where.append(self.path)
            if where[0].startswith("/"):  # a path: that file served
                body = Path(where[0]).read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(302)
            self.send_header("Location", where[0])
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_HEAD(self) -> None:  # nothing there yet
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_PUT(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.do_GET()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, args=(0.05,)).start()
    where.append(f"http://127.0.0.1:{server.server_address[1]}/b.warm")
    try:
        yield where
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("host", TWO_WAYS)
def test_a_plain_http_url_whose_host_is_read_two_ways_is_refused(
    warm: Warm, tmp_path: Path, host: str
) -> None:
    """`http://u:s3cr3t@[::1]x.invalid:8/b.warm` was taken as plain http:// to this machine (its
    host read as `::1`), then connected to the name `[::1]x.invalid` (a DNS lookup: with an
    answer, a remote machine got the download's request and its password, in the clear).
    Refused now as malformed (review43c: was as plain http:// elsewhere), before any lookup."""
    proc = warm("pull", f"http://u:s3cr3t@{host}:8/b.warm", tmp_path / "b.warm")
    assert proc.returncode == 2, proc.stderr
    assert "is malformed" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "s3cr3t" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("host", TWO_WAYS)
def test_a_redirect_to_a_host_read_two_ways_is_refused(
    warm: Warm, tmp_path: Path, redirecting: list[str], host: str
) -> None:
    """A plain http:// store on this machine redirecting to `http://[::1]x.invalid:8/` was
    followed (judged this machine's), and the name looked up: refused now, one line."""
    redirecting[0] = f"http://{host}:8/b.warm"
    proc = warm("pull", redirecting[1], tmp_path / "b.warm")
    assert proc.returncode == 2, proc.stderr
    assert "redirect to" in proc.stderr and "refused" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_push_redirected_elsewhere_says_the_redirect_refused_once(
    warm: Warm, tmp_path: Path, redirecting: list[str], host_bundle: Callable[[Path], Path]
) -> None:
    """A store answering a push's PUT with a redirect to plain http:// elsewhere: refused,
    but said as `store unreachable (URL: redirect to ... refused (...))`, the URL twice and
    the store called unreachable though it answered. Said as the download says it now."""
    redirecting[0] = "http://192.0.2.1/b.warm"
    proc = warm("push", host_bundle(tmp_path / "b.warm"), redirecting[1])
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip()
    assert line == f"warm: error: {redirecting[1]}: redirect to {redirecting[0]} refused " + (
        "(http:// is taken only for this machine (localhost, or a loopback address: "
        "127.0.0.1, ::1))"
    ), line


def test_a_pull_over_a_path_whose_journal_is_a_fifo_ends_and_replaces_it(
    warm: Warm, tmp_path: Path, redirecting: list[str], host_bundle: Callable[[Path], Path]
) -> None:
    """`warm pull URL PATH` where a FIFO sits beside PATH as its `-journal` (planted by
    anyone who may write the folder): counting what PATH held that the pull drops opened PATH
    read-only with SQLite, whose look for a hot journal opened the FIFO and waited for a
    writer of the pipe for ever, in C, retrying on EINTR: SIGINT, SIGTERM and SIGHUP were
    never acted on (only SIGKILL ended it), PATH's write lock held all along. The journal is
    judged first now (`check_journal`), as every other open of a bundle judges it: the pull
    ends, and PATH is the pulled bundle, sound."""
    redirecting[0] = str(host_bundle(tmp_path / "served.warm"))
    path = host_bundle(tmp_path / "b.warm")
    os.mkfifo(f"{path}-journal")
    try:
        proc = warm("pull", redirecting[1], path, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("warm pull hung on PATH's FIFO journal")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert warm("verify", path).returncode == 0


def test_a_workload_that_is_there_but_no_file_is_not_said_missing(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm run w.py` where `w.py` is a FIFO (or a link to /dev/null) said `w.py: no such
    workload file`, though it is there: said as what it is now, one line, nothing opened
    (a FIFO's open would wait for a writer)."""
    fifo = tmp_path / "w.py"
    os.mkfifo(fifo)
    (tmp_path / "null.py").symlink_to(os.devnull)
    for path in (fifo, tmp_path / "null.py"):
        proc = warm("run", path, "-b", tmp_path / "b.warm", timeout=60)
        assert proc.returncode == 2, proc.stderr
        assert (
            proc.stderr
            == f"warm: error: {path}: is no regular file: a workload is a Python file (.py)\n"
        )
    assert not (tmp_path / "b.warm").exists()


HOLD_READ = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN")
conn.execute("SELECT count(*) FROM tunes").fetchall()  # its read lock, held
print("held", flush=True)
time.sleep(60)
"""


def _into_the_removal(clean: subprocess.Popen[str], journal: Path) -> None:
    """Until `clean`'s removal has begun (its rollback journal there: the one write of the
    command) and its journal has stopped growing (the statement done, the commit waiting for
    the reader, once it is quick; 3 s at most, as long as the fixed wait this replaced)."""
    deadline = time.monotonic() + 60  # (generous: a loaded machine's start and imports)
    while not journal.exists():
        assert clean.poll() is None, f"ended before its removal: {clean.communicate()}"
        assert time.monotonic() < deadline, "the removal never began"
        time.sleep(0.02)
    settled, size = time.monotonic() + 3, -1
    while time.monotonic() < settled and size != (size := _size(journal)):
        time.sleep(0.2)


def _size(path: Path) -> int:
    with contextlib.suppress(OSError):
        return path.stat().st_size
    return -1


def test_a_big_removal_under_a_reader_ends_at_once_on_sigterm(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """`warm clean --tune OP` removing 20,000 tunes while a reader holds its read lock: the
    removal's changes outgrow SQLite's page cache, whose spill to the file needs the readers
    gone, so SQLite waited its whole slice (50 ms) for them at each page read from then on,
    in C: the removal took minutes, and a SIGTERM (held while the write is one step) was not
    acted on for all that time (over 30 s: past a pod's grace period). The write's statements
    wait for nothing now (a spill refused leaves the pages in memory, as the slice's did);
    the commit waits for the reader, a slice at a time, and the signal ends it: exit 130,
    nothing removed. (The tunes made here are not warm's own: `warm verify` would flag them.)"""
    path = host_bundle(tmp_path / "b.warm")
    with sqlite3.connect(path) as conn:
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) "
            "INSERT INTO tunes SELECT randomblob(32), 'bulk', shape_key || i, device, checksum, "
            "status, pick, candidates, seconds, measured_at, updated || randomblob(200) "
            "FROM n, (SELECT * FROM tunes LIMIT 1)"
        )
    conn.close()
    reader = subprocess.Popen(
        [sys.executable, "-c", HOLD_READ, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline() == "held\n"
        clean = warm.popen("clean", "--tune", "bulk", path)
        _into_the_removal(clean, Path(f"{path}-journal"))
        clean.send_signal(signal.SIGTERM)
        try:
            _, err = clean.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            clean.kill()
            clean.communicate()
            pytest.fail("warm clean did not end within 5 s of SIGTERM")
        assert clean.returncode == 130, err
        assert err.startswith("warm: interrupted"), err
    finally:
        reader.kill()
        reader.wait()
    with contextlib.closing(sqlite3.connect(path)) as conn:  # undone whole: every tune kept
        assert conn.execute("SELECT count(*) FROM tunes").fetchone() == (20003,)
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


FILLS = """
from warmcli import Kernel
DEVICE = "host"
SRC = "void fill(double *o, int n) { for (int i = 0; i < n; i++) o[i] = i / (DIV) + 0.5; }"
def workload(rt):
    for d in (3, 5, 6):
        rt.launch(Kernel(SRC, "fill", "Pi", defines={"DIV": d}), rt.buffer(5, "float64"), 5)
"""
# A production process started while a writer holds its bundle's lock (the waits shortened,
# as tests/test_leftovers42a.py shortens them): cold at first, then served once it is free.
LATE_OPEN = """
import time
import warmcli.bundle.file as bundle_file
import warmcli.bundle.reopening as reopening
bundle_file.LOCK_WAIT_SECONDS, reopening.REOPEN_SECONDS = 1.0, 0.5
import warmcli
from warmcli import Kernel
SRC = "void fill(double *o, int n) { for (int i = 0; i < n; i++) o[i] = i / (DIV) + 0.5; }"
rt = warmcli.runtime("host")
def launch(d):
    o = rt.buffer(5, "float64")
    rt.launch(Kernel(SRC, "fill", "Pi", defines={"DIV": d}), o, 5)
    return rt.read(o).tolist()
print(launch(3), len(warmcli.report().kernels), flush=True)
input()  # the lock is free now
time.sleep(0.6)
print(launch(5), launch(6), len(warmcli.report().kernels), flush=True)
"""
HOLD = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
input()
conn.execute("ROLLBACK")
"""


def test_a_bundle_path_of_no_utf8_locked_at_open_is_served_once_free(
    warm: Warm, tmp_path: Path
) -> None:
    """`WARM_BUNDLE` naming a file whose name is no UTF-8 (a byte a Latin-1 system wrote),
    locked by a writer when the process opened it: at the next lookup's try, the lock's
    probe spelled the path as a URI with `urllib.parse.quote`, which raised
    `UnicodeEncodeError` out of the workload's launch (a traceback, the process dead).
    Spelled now as every read-only open spells it (`file._read_only_uri`): served."""
    path = tmp_path / os.fsdecode(b"b\xff.warm")
    workload = tmp_path / "fills.py"
    workload.write_text(FILLS)
    assert warm("run", "-q", "--bundle", path, workload).returncode == 0
    env = dict(warm.env, WARM_BUNDLE=str(path), PYTHONPATH=str(Path(__file__).parents[1]))
    pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(path)], **pipes)  # type: ignore[call-overload]
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        server = subprocess.Popen(
            [sys.executable, "-c", LATE_OPEN], env=env, stderr=subprocess.PIPE, **pipes
        )  # type: ignore[call-overload]
        assert server.stdout is not None
        assert server.stdout.readline().endswith("] 1\n")  # cold: the one it launched
        holder.communicate("\n", timeout=10)  # the writer ends
        out, err = server.communicate("\n", timeout=30)
    finally:
        holder.kill()
    assert server.returncode == 0, err
    assert "Traceback" not in err
    assert out.endswith(" 1\n"), out  # served: nothing more compiled
