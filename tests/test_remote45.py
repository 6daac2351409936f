"""An `s3://` store that drips its answers stops at `WARM_REMOTE_DEADLINE` on every path
(remote45): `warm pull` (a GET whose headers drip after a whole HEAD, a body that drips),
a production process with a last good copy (served, one warning, at the deadline), a
library `fetch` given up on (its thread writes nothing after: no temporary file, the last
good copy untouched once the store sent the rest), and `warm push` (a HEAD that drips:
nothing sent). Against a raw S3-speaking server on 127.0.0.1 and the real CLI. How long a
store dripped before warm hung up is timed by the store's own clock, from its drip's start: a
whole process's time (python, numpy and boto3 started) passed 7 s under a loaded CI's load.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's, commands forked)
from raw_store import RawStore
from test_remote import PRODUCE, built  # noqa: F401  (fixtures)

from warmcli.bundle.remote import RemoteError, cache_dir, fetch

pytest.importorskip("boto3")
URL = "s3://fleet/b.warm"
DRIP = 0.2  # seconds between dripped bytes: well within any read's wait
DRIPS = 40  # then the store stops: 8 s, far past a deadline of 1 s


class _S3(RawStore):
    """One S3 object on 127.0.0.1 (`body`, its ETag the mode's name) answered as `mode`
    says: "ok" whole; "drip-head" every answer's headers a byte at a time; "drip-get"
    a whole HEAD, then the GET's headers dripped; "drip-body" the GET's headers whole,
    then its body a byte at a time; "late-body" 1000 bytes, 1.5 s of silence, the rest;
    "drip-put" nothing there (a HEAD's 404), a PUT's body taken whole (`put`), then its
    answer dripped; "drip-expect" the PUT's answer dripped as its headers arrive."""

    threaded = True

    def __init__(self, body: bytes) -> None:
        self.body, self.mode, self.sent_all = body, "ok", threading.Event()
        self.hung_up: float | None = None  # seconds into a drip its client went away
        self.dripped = threading.Event()  # a drip ended: its client gone, or all sent
        super().__init__()

    def answer(self, conn: socket.socket, request: bytes) -> None:
        head = request.startswith(b"HEAD")
        if self.mode in ("drip-put", "drip-expect") and head:
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return
        if self.mode == "drip-put":
            self.put = self._body(conn, request)
        lines = b'HTTP/1.1 200 OK\r\nETag: "%s"\r\nContent-Length: %d\r\n\r\n' % (
            self.mode.encode(),
            len(self.body),
        )
        if self.mode in ("drip-head", "drip-put", "drip-expect") or (
            self.mode == "drip-get" and not head
        ):
            conn.sendall(b"HTTP/1.1 200 OK\r\nX-Drip: ")
            self._drip(conn, (b"a" for _ in range(DRIPS)))
            return
        conn.sendall(lines)
        if head:
            return
        if self.mode == "drip-body":
            self._drip(conn, (self.body[i : i + 1] for i in range(DRIPS)))
        elif self.mode == "late-body":
            conn.sendall(self.body[:1000])
            time.sleep(1.5)
            conn.sendall(self.body[1000:])
            self.sent_all.set()
        else:
            conn.sendall(self.body)

    def _drip(self, conn: socket.socket, parts: Iterator[bytes]) -> None:
        """`parts` sent one a `DRIP`; `hung_up` set where the client went away first (a send
        or two after: within 2 DRIPs), `dripped` either way."""
        began = time.monotonic()
        try:
            for part in parts:
                time.sleep(DRIP)
                conn.sendall(part)
        except OSError:
            self.hung_up = time.monotonic() - began
        self.dripped.set()

    @staticmethod
    def _body(conn: socket.socket, request: bytes) -> bytes:
        """A PUT's body, read whole (a `100 Continue` first, where it is expected)."""
        headers, _, body = request.partition(b"\r\n\r\n")
        fields = dict(
            line.split(b":", 1) for line in headers.lower().split(b"\r\n")[1:] if b":" in line
        )
        if fields.get(b"expect", b"").strip() == b"100-continue":
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        while len(body) < int(fields[b"content-length"]):
            body += conn.recv(65536) or b"x" * (1 << 30)  # (closed: ends the loop)
        return body


def _aws(store: _S3, home: Path, **more: str) -> dict[str, str]:
    return {
        "WARM_HOME": str(home),
        "AWS_ENDPOINT_URL": store.endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        **more,
    }


def _no_temporaries(home: Path) -> None:
    assert not list((home / "remote").glob("*/*.tmp")), list((home / "remote").rglob("*"))


@pytest.mark.parametrize("mode", ["drip-get", "drip-body"])
def test_a_pull_from_an_s3_store_that_drips_stops_at_the_deadline(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    mode: str,
) -> None:
    store = _S3(built[0])
    store.mode = mode
    env = _aws(store, tmp_path / "home", WARM_REMOTE_DEADLINE="1")
    out = tmp_path / "out.warm"
    try:  # timed by the store, from its drip's start: not the process's (boto3's import)
        proc = warm.with_env(**env)("pull", URL, out, timeout=60)
        assert store.dripped.wait(DRIP * DRIPS + 5)
    finally:
        store.close()
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
    assert "WARM_REMOTE_DEADLINE" in proc.stderr, proc.stderr
    assert store.hung_up is not None and store.hung_up < 5, store.hung_up  # (the drip: 8 s)
    assert not out.exists()
    _no_temporaries(tmp_path / "home")


def test_a_production_process_serves_its_last_good_copy_at_the_deadline(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
) -> None:
    store = _S3(built[0])
    env = dict(warm.env, **_aws(store, tmp_path / "home", WARM_REMOTE_DEADLINE="1"))
    try:
        assert warm.with_env(**env)("stats", URL).returncode == 0  # a last good copy
        store.mode = "drip-get"  # changed (its ETag), and its GET drips
        served = subprocess.run(
            [sys.executable, "-c", PRODUCE],
            capture_output=True,
            text=True,
            env=dict(env, WARM_BUNDLE=URL),
            cwd=ROOT,
            timeout=60,
        )
        assert store.dripped.wait(DRIP * DRIPS + 5)
    finally:
        store.close()
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout) == {"kernels": 0, "tunes": 0}
    assert served.stderr.count("RemoteBundleWarning") == 1, served.stderr
    assert "last good copy" in served.stderr and "WARM_REMOTE_DEADLINE" in served.stderr
    assert store.hung_up is not None and store.hung_up < 5, store.hung_up  # (the drip: 8 s)
    _no_temporaries(tmp_path / "home")


def test_a_fetch_given_up_writes_nothing_after_the_deadline(
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a process that goes on (a library caller): the thread left reading the store
    makes no temporary file and publishes nothing once the store sends the rest."""
    store = _S3(built[0])
    for key, value in _aws(store, tmp_path / "home").items():
        monkeypatch.setenv(key, value)
    try:
        first = fetch(URL)
        assert first.downloaded and first.path.read_bytes() == built[0]
        store.body, store.mode = built[1], "late-body"  # changed: sent with a pause
        monkeypatch.setenv("WARM_REMOTE_DEADLINE", "1")
        began = time.monotonic()
        got = fetch(URL)
        took = time.monotonic() - began
        assert store.sent_all.wait(10)  # the rest sent, to a thread given up on
        time.sleep(0.5)  # (its reads and writes, were it to make any)
    finally:
        store.close()
    assert not got.downloaded and got.warning and "WARM_REMOTE_DEADLINE" in got.warning
    assert took < 4.5, took  # (boto3's import too, under load; the drip lasts 8 s)
    folder = cache_dir(URL)
    assert sorted(p.name for p in folder.iterdir()) == ["bundle.warm", "lock", "meta.json"]
    assert (folder / "bundle.warm").read_bytes() == built[0]


def test_a_fetch_with_no_copy_raises_at_the_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As production raises it: one `RemoteError` naming the deadline, in about it."""
    store = _S3(b"x" * 4096)
    store.mode = "drip-head"
    for key, value in _aws(store, tmp_path / "home", WARM_REMOTE_DEADLINE="0.5").items():
        monkeypatch.setenv(key, value)
    try:
        began = time.monotonic()
        with pytest.raises(RemoteError, match="WARM_REMOTE_DEADLINE"):
            fetch(URL)
        took = time.monotonic() - began
    finally:
        store.close()
    assert took < 4, took  # (boto3's import too, under load; the drip lasts 8 s)


def _pushed_late(push: Warm, bundle: Path, url: str, bound: float) -> None:
    """`warm push bundle url` stopped at a 1 s deadline: one line, exit 2, within `bound` s."""
    began = time.monotonic()
    proc = push("push", bundle, url, timeout=60)
    took = time.monotonic() - began
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
    said = proc.stderr  # once the body is sent, the store may hold it (remote46): unknown
    assert "not pushed" in said or "not known to be pushed" in said, said
    assert "WARM_REMOTE_DEADLINE" in said, said
    assert took < bound, took


@pytest.mark.parametrize("mode", ["drip-head", "drip-put", "drip-expect"])
def test_a_push_to_an_s3_store_that_drips_stops_at_the_deadline(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    mode: str,
) -> None:
    """Its HEAD's answer (on main it hung ~8 s, then said "pushed", exit 0), or its PUT's
    once the upload is sent, or before (to `Expect: 100-continue`): waited for the deadline
    at most, as an https:// store's; the upload itself is not bounded. How long the store
    dripped before warm hung up is its own clock's (a whole process's time under CI's load
    passed 6 s, a 1 s deadline and boto3's import)."""
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(built[0])
    store = _S3(b"")
    store.mode = mode
    env = _aws(store, tmp_path / "home", WARM_REMOTE_DEADLINE="1")
    try:  # timed by the store, from its drip's start: not the process's start (boto3's import)
        _pushed_late(warm.with_env(**env), bundle, URL, 60)
        assert store.dripped.wait(DRIP * DRIPS + 5)
    finally:
        store.close()
    assert store.hung_up is not None and store.hung_up < 5, store.hung_up  # (the drip: 8 s)
    if mode == "drip-put":  # the upload was sent whole before its answer was waited for
        assert store.put.endswith(built[0][-1000:]) or built[0] in store.put


def test_a_push_to_an_https_store_that_drips_its_handshake_stops_at_the_deadline(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
) -> None:
    """A push's HEAD waited each socket read 10 s (`TIMEOUT`), its TLS handshake included,
    whatever the deadline: a store dripping its handshake took 10.4 s at a 1 s deadline.
    Each wait is min(10 s, the deadline) now, as a fetch's is."""
    from test_fleet_remote import _DripHandshake

    bundle = tmp_path / "b.warm"
    bundle.write_bytes(built[0])
    store = _DripHandshake()
    try:
        limited = warm.with_env(WARM_HOME=str(tmp_path / "home"), WARM_REMOTE_DEADLINE="1")
        _pushed_late(limited, bundle, store.url, 8)
    finally:
        store.close()
