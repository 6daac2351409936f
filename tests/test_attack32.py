"""Attacks of review 32: what a bundle (and the files handed over beside it) from elsewhere
could make warm do to a user's other files, its memory or its terminal.

Every case is real: bundles made by `warm run examples/matmul_host.py`, changed with
Python's sqlite3, read by the real CLI in a subprocess (a fork of a process that imported the
CLI once, `tests/forked_cli.py`; started where it runs beside another, or its peak of memory
is measured) and by production processes (forks of one that imported numpy and warmcli
once, `tests/forked_python.py`).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, Warm
from forked_cli import forked_made, forked_warm  # noqa: F401  (conftest's, commands forked)
from forked_python import ForkedPython
from test_production_defaults import MATMUL, SERVE


@pytest.fixture(scope="module")
def producing() -> Iterator[ForkedPython]:
    """The production processes' server (conftest's `warm` environment,
    `tests/forked_python.py`): what each serves and logs is tested, not how it starts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    python = ForkedPython(dict(env, COLUMNS="200"), ROOT)
    yield python
    python.close()


def serve(producing: ForkedPython, warm: Warm, **env: str) -> subprocess.CompletedProcess[str]:
    """`test_production_defaults.serve` (the example's workload in a production process of
    `warm`'s environment, `WARM_REPORT=1`, `env` over it), forked from `producing`."""
    environ = {**warm.env, "WARM_REPORT": "1", **env}
    return producing.run(SERVE.format(example=str(MATMUL)), env=environ, cwd=ROOT, timeout=120)


PRECIOUS = "precious user data\n" * 100


def wal_bundle(made: tuple[Warm, Path], folder: Path) -> Path:
    """A copy of the example's bundle switched to WAL mode by SQLite itself (as a foreign
    SQLite user would leave it), in `folder`."""
    folder.mkdir()
    bundle = folder / "b.warm"
    shutil.copy(made[1], bundle)
    with sqlite3.connect(bundle) as conn:
        assert conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
    conn.close()
    return bundle


@pytest.mark.parametrize("side", ["-shm", "-wal"])
def test_a_wal_index_hard_linked_to_a_users_file_never_gets_it_overwritten(
    made: tuple[Warm, Path], tmp_path: Path, side: str
) -> None:
    """Switching a WAL bundle back opens its `-shm` (and `-wal`) for writing: one that is a
    hard link to another file of the user's is refused, the user's file left as it was
    (SQLite truncated and rewrote it as its WAL index: `warm stats` lost the user's data)."""
    warm, _ = made
    bundle = wal_bundle(made, tmp_path / "handed")
    victim = tmp_path / "notes.txt"
    victim.write_text(PRECIOUS)
    os.link(victim, f"{bundle}{side}")
    for command in (["stats", bundle], ["verify", bundle], ["check", bundle, "--json"]):
        done = warm(*command)
        assert victim.read_bytes() == PRECIOUS.encode(), command
        assert done.returncode == 2, done.stdout + done.stderr
        assert f"b.warm{side} is a hard link" in done.stderr + done.stdout
        assert "Traceback" not in done.stderr


WAITS_THEN_FAILS = """
import os, time
DEVICE = "host"
def workload(rt):
    deadline = time.monotonic() + 120
    while not os.path.exists({go!r}) and time.monotonic() < deadline:
        time.sleep(0.05)
    raise RuntimeError("this workload fails")
"""


def test_a_failed_first_run_never_removes_what_another_run_stored_meanwhile(
    warm: Warm, tmp_path: Path
) -> None:
    """Two `warm run`s into a new bundle: the first creates it and its workload fails; the
    second stores into it meanwhile. The failed run removes a bundle it only created, not
    one holding another run's kernels and tunes (it deleted them: 6 kernels, 3 tunes lost)."""
    bundle, go = tmp_path / "shared.warm", tmp_path / "go"
    failing = tmp_path / "fails.py"
    failing.write_text(WAITS_THEN_FAILS.format(go=str(go)))
    first = warm.popen("run", failing, "-b", bundle, "-q")
    try:
        deadline = time.monotonic() + 120
        while not bundle.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert bundle.exists(), "the failing run never created its bundle"
        second = warm("run", EXAMPLES / "matmul_host.py", "-b", bundle, "-q")
        assert second.returncode == 0, second.stderr
    finally:
        go.write_text("")
        _, err = first.communicate(timeout=120)
    assert first.returncode == 2, err
    assert "this workload fails" in err
    assert bundle.exists(), "the failed run removed the bundle another run stored into"
    stats = warm.json("stats", bundle)
    assert (len(stats["kernels"]), len(stats["tunes"])) == (6, 3)


@pytest.mark.parametrize("planted", ["file", "folder"])
def test_a_default_bundle_others_may_write_is_never_loaded_unasked(
    warm: Warm,
    tmp_path: Path,
    planted: str,
    host_bundle: Callable[[Path], Path],
    producing: ForkedPython,
) -> None:
    """The default bundle is loaded without anyone naming it, and its kernels are native
    code: like the host libraries and remote copies beside it in warm's home, it is believed
    only where no other user may write it (a world-writable file, or one in a folder others
    may write, is someone else's to fill). Such a one costs a cold start, logged; before,
    a production process served every kernel from it."""
    home = Path(warm.env["WARM_HOME"])
    home.mkdir()
    home.chmod(0o755)  # as `warm run` makes it (0o775 less the umask)
    bundle = host_bundle(home / "bundle.warm")  # what `warm run EXAMPLE -q` leaves there
    hot = serve(producing, warm)
    assert "served everything: compiled 0 kernels" in hot.stderr, hot.stderr
    (bundle if planted == "file" else home).chmod(0o777 if planted == "folder" else 0o666)
    try:
        cold = serve(producing, warm)
        strict = serve(producing, warm, WARM_STRICT="1")
        named = serve(producing, warm, WARM_BUNDLE=str(bundle))  # named: served as asked
        commands = [warm("run", EXAMPLES / "matmul_host.py", "-q"), warm("stats")]
    finally:
        home.chmod(0o755)
    assert cold.returncode == 0, cold.stderr
    assert "warm: default bundle not loaded:" in cold.stderr
    assert "others may write" in cold.stderr
    assert "warm: no bundle is loaded: this process compiled 6 kernel(s)" in cold.stderr
    assert strict.returncode == 1 and "BundleError" in strict.stderr
    assert "served everything: compiled 0 kernels" in named.stderr, named.stderr
    for done in commands:  # warm's commands that take the default bundle refuse it too
        assert done.returncode == 2, done.stdout + done.stderr
        assert "others may write it" in done.stderr and "Traceback" not in done.stderr


def test_a_write_lock_that_is_a_symbolic_link_creates_no_file_where_it_points(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A bundle handed over with `b.warm.lock` beside it, a symbolic link to a path outside
    its folder: a writer refuses it (one line, exit 2) rather than follow it (`warm run`
    created an empty file there, any file the user may create: `/etc/nologin` as root)."""
    warm, good = made
    folder = tmp_path / "handed"
    folder.mkdir()
    bundle = folder / "b.warm"
    shutil.copy(good, bundle)
    elsewhere = tmp_path / "elsewhere" / "made_by_warm"
    elsewhere.parent.mkdir()
    (folder / "b.warm.lock").symlink_to(elsewhere)
    for command in (
        ["run", EXAMPLES / "matmul_host.py", "-b", bundle, "-q"],
        ["merge", good, bundle, "-o", bundle],
    ):
        done = warm(*command)
        assert not elsewhere.exists(), command
        assert done.returncode == 2, (command, done.stdout + done.stderr)
        assert "b.warm.lock is a symbolic link" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert bundle.read_bytes() == good.read_bytes()


class _Dripping:
    """A store on this machine that reads a request (a HEAD, or a PUT and its whole body)
    and then drips an answer a header line a second, never ending it: each read of the
    answer is within any per-read wait, and the answer never completes."""

    def __init__(self, drip_on: str) -> None:
        import socket
        import threading

        self.drip_on = drip_on
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.stopped = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        import threading

        while not self.stopped.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: object) -> None:
        import socket

        assert isinstance(conn, socket.socket)
        with conn:
            try:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(65536)
                top, _, body = head.partition(b"\r\n\r\n")
                method = top.split(b" ", 1)[0].decode()
                if method != self.drip_on:  # a HEAD the store answers plainly: nothing here
                    conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    return
                length = next(
                    (int(line.split(b":")[1]) for line in top.split(b"\r\n")[1:]
                     if line.lower().startswith(b"content-length:")),
                    0,
                )  # fmt: skip
                while len(body) < length:
                    body += conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\n")
                while not self.stopped.wait(1.0):
                    conn.sendall(b"X-Drip: 1\r\n")
            except OSError:
                return

    def close(self) -> None:
        self.stopped.set()
        self.server.close()


@pytest.mark.parametrize("drip_on", ["HEAD", "PUT"])
def test_a_push_to_a_store_that_drips_its_answer_stops_at_the_deadline(
    made: tuple[Warm, Path], drip_on: str
) -> None:
    """`warm push` to a store that answers its HEAD (or, once the upload is sent, its PUT)
    a header line a second, for ever: it stops at `WARM_REMOTE_DEADLINE` (one line, exit 2)
    rather than wait for ever (each line came within the 10 s read wait: it never ended)."""
    warm, good = made
    store = _Dripping(drip_on)
    try:
        url = f"http://127.0.0.1:{store.port}/b.warm"
        done = warm.with_env(WARM_REMOTE_DEADLINE="2")("push", good, url, timeout=90)
    finally:
        store.close()
    assert done.returncode == 2, done.stdout + done.stderr
    assert "WARM_REMOTE_DEADLINE" in done.stderr and "Traceback" not in done.stderr


def test_clean_of_a_bundle_of_millions_of_kernel_ids_stays_flat_in_memory(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A bundle holding 1,500,000 interned kernel keys no tune names and one corrupt tune:
    `warm clean` removes the tune and the unused ids without reading the table into memory
    (it held every id in a Python list and set: ~190 MiB peak here, growing with the rows;
    179 MiB, 106 without them, in one run: 1,200,000 rows were only 45 MiB over)."""
    from test_blob_memory import _PEAK

    warm, good = made
    plain, bundle = tmp_path / "plain.warm", tmp_path / "many.warm"
    for each in (plain, bundle):
        shutil.copy(good, each)
        with sqlite3.connect(each) as conn:
            if each == bundle:
                conn.execute(  # 32-byte keys, each its own
                    "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n"
                    " WHERE i + 1 < 1500000) INSERT INTO tune_kernels (key)"
                    " SELECT CAST(printf('junk%028d', i) AS BLOB) FROM n"
                )
            first = "(SELECT min(rowid) FROM tunes)"
            conn.execute(f"UPDATE tunes SET candidates = x'ff' WHERE rowid = {first}")
        conn.close()

    def peak(path: Path) -> int:
        done = subprocess.run(
            [sys.executable, "-c", _PEAK, "clean", str(path)],
            env=warm.env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        assert "removed 0 kernel(s) and 1 tune(s)" in done.stdout
        return int(done.stderr.strip().splitlines()[-1].split()[1])

    baseline, many = peak(plain), peak(bundle)  # the same clean, without the junk rows
    assert many < baseline + (30 << 20), f"peak {many >> 20} MiB, {baseline >> 20} without"
    with sqlite3.connect(bundle) as conn:
        assert conn.execute("SELECT count(*) FROM tune_kernels").fetchone()[0] < 10
    conn.close()
