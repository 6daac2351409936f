"""Fleet review: a URL's local copy in WARM_HOME/remote/ is believed only when this
user alone could have written it, against a real HTTP server on 127.0.0.1 and the real
CLI (each command a fork of a process that imported it once, `tests/forked_cli.py`).

A copy folder others may write (a shared or pre-made WARM_HOME), or a `bundle.warm` /
`meta.json` in it that is a link or another's, could hold a bundle someone planted with
the ETag the store answers "unchanged" to: that bundle's native code would be served
as the store's. Such a folder is refused in one line (no copy is kept where others
could swap it); such a file is not believed: the bundle is downloaded afresh.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import ForkedWarm, forked_warm  # noqa: F401  (conftest's, commands forked)
from raw_store import RawStore, warm_waiting
from test_remote import PRODUCE, Store, built, http_store  # noqa: F401  (fixtures)

from warmcli.bundle.remote import RemoteError, cache_dir, fetch


def _plant(home: Path, url: str, planted: bytes, etag_of: bytes, *, link: bool) -> Path:
    """What another user leaves in `url`'s copy folder: a bundle of theirs, remembered
    under the ETag of what the store holds; the folder returned."""
    env_home = os.environ.get("WARM_HOME")
    os.environ["WARM_HOME"] = str(home)
    try:
        folder = cache_dir(url)
    finally:
        if env_home is not None:
            os.environ["WARM_HOME"] = env_home
    folder.mkdir(parents=True)
    evil = home / "evil.warm"
    evil.write_bytes(planted)
    if link:
        (folder / "bundle.warm").symlink_to(evil)
    else:
        (folder / "bundle.warm").write_bytes(planted)
    etag = '"' + hashlib.sha256(etag_of).hexdigest() + '"'
    (folder / "meta.json").write_text(json.dumps({"etag": etag, "sha256": "0" * 64}))
    return folder


def _pull_planted(
    warm: ForkedWarm, tmp_path: Path, bundles: tuple[bytes, bytes], served: tuple, *, link: bool
) -> tuple[subprocess.CompletedProcess[str], Path, Path, Path, Store]:
    """`warm pull` of the store's bundle into `out.warm`, with a bundle planted in the copy
    folder (0777 as a pre-made shared folder is, else 0700 holding a link to it)."""
    store, base, _ = served
    store.files["/b.warm"] = bundles[0]
    url, home = f"{base}/b.warm", tmp_path / "home"
    folder = _plant(home, url, bundles[1], bundles[0], link=link)
    folder.chmod(0o700 if link else 0o777)
    out = tmp_path / "out.warm"
    return warm.with_env(WARM_HOME=str(home))("pull", url, out), out, folder, home, store


def test_a_copy_folder_others_may_write_is_refused_not_served(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    proc, out, _, _, _ = _pull_planted(warm, tmp_path, built, http_store, link=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
    assert "others may write" in proc.stderr and not out.exists()


def test_a_linked_copy_is_not_believed_but_downloaded_afresh(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    proc, out, folder, home, store = _pull_planted(warm, tmp_path, built, http_store, link=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert out.read_bytes() == built[0] and store.downloads == 1
    assert not (folder / "bundle.warm").is_symlink()
    assert (home / "evil.warm").read_bytes() == built[1]  # the link's target untouched


class _DripHeaders:
    """A store on 127.0.0.1 that answers at once, then sends its headers a byte at a
    time (each wait well under the 10 s a read may take), for as long as it is let: until
    it is closed (a client not stopped at its deadline waits until the test's timeout)."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.stop = threading.Event()
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}/b.warm"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            conn, _ = self.server.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Drip: ")
                while not self.stop.wait(0.3):
                    conn.sendall(b"a")

    def close(self) -> None:
        self.stop.set()
        self.server.close()


class _DripHandshake(_DripHeaders):
    """An https:// store on 127.0.0.1 that takes the connection, then sends its TLS
    handshake a byte at a time: a record header saying 16 kB, then a byte every 0.3 s."""

    def __init__(self) -> None:
        super().__init__()
        self.url = self.url.replace("http://", "https://", 1)

    def _serve(self) -> None:
        with contextlib.suppress(OSError):
            conn, _ = self.server.accept()
            with conn:
                conn.recv(65536)  # the ClientHello
                conn.sendall(b"\x16\x03\x03\x40\x00")  # a handshake record of 16,384 bytes
                while not self.stop.wait(0.3):
                    conn.sendall(b"\x02")


@pytest.mark.parametrize("dripping", [_DripHeaders, _DripHandshake])
def test_a_store_that_drips_its_headers_stops_at_the_deadline(
    warm: Warm, tmp_path: Path, dripping: type[_DripHeaders]
) -> None:
    """Its headers, or its TLS handshake (held: `ssl` bounds a handshake by the socket's
    wait, min(`TIMEOUT`, the deadline)). Warm's `TIMEOUT` is 600 s here, and the store drips
    until it is closed: a read or handshake the deadline did not end runs past the 180 s
    timeout, and the wall bound only tells that from a 1 s deadline kept on a slow machine."""
    store = dripping()
    try:
        env = dict(warm.env, WARM_HOME=str(tmp_path / "home"), WARM_REMOTE_DEADLINE="1")
        began = time.monotonic()
        proc = warm_waiting(env, "stats", store.url, wait=600, timeout=180)
        took = time.monotonic() - began
    finally:
        store.close()
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
    assert "WARM_REMOTE_DEADLINE" in proc.stderr and took < 60, (took, proc.stderr)
    assert not list((tmp_path / "home" / "remote").glob("*/*.tmp"))


def production_runtime(
    env: dict[str, str], url: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    """A production process making its runtime over `url` (`WARM_BUNDLE`): prints
    `RemoteError <its text>` where that is what it raised."""
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import warmcli\ntry:\n warmcli.runtime('host')\n"
            "except warmcli.errors.RemoteError as e:\n print('RemoteError', e)",
        ],
        capture_output=True,
        text=True,
        env=dict(env, WARM_BUNDLE=url),
        cwd=cwd,
        timeout=60,
    )


class _Answers(RawStore):
    """A store on 127.0.0.1 that answers every request with `answer` (raw bytes, the
    port filled in for `%d`), then hangs up."""

    def __init__(self, answer: bytes) -> None:
        super().__init__()
        self.said = answer.replace(b"%d", str(self.port).encode())

    def answer(self, conn: socket.socket, request: bytes) -> None:
        conn.sendall(self.said)


@pytest.mark.parametrize(
    "answer",
    [
        b"\x1b]0;owned\x07\x1b[2J\r\n\r\n",  # no status line: its text in the error
        b"HTTP/1.1 500 \x1b[2Jboom\x1b]8;;http://x\x07\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:%d/b.warm\r\nContent-Length: 0\r\n\r\n",
    ],
    ids=["status-line", "reason", "redirect-loop"],
)
def test_what_a_store_says_is_one_inert_line(
    warm: Warm, tmp_path: Path, answer: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _Answers(answer)
    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    try:
        proc = warm.with_env(WARM_HOME=str(tmp_path / "home"))("stats", store.url)
        with pytest.raises(RemoteError) as caught:  # as production raises it
            fetch(store.url)
    finally:
        store.server.close()
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr, proc.stderr
    text = str(caught.value)
    assert not any(ord(c) < 32 for c in text), repr(text)


class _DyingS3(RawStore):
    """An S3 endpoint on 127.0.0.1 that serves one object: whole (mode "ok"), or its
    GET cut short ("truncate": half the announced bytes, then the connection closed;
    "reset": a reset after 1000 bytes), or whole without an ETag ("no-etag"). Each other
    mode has its own ETag."""

    threaded = True

    def __init__(self, body: bytes) -> None:
        self.body, self.mode = body, "ok"
        super().__init__()

    def answer(self, conn: socket.socket, request: bytes) -> None:
        body = self.body
        etag = b"" if self.mode == "no-etag" else b'ETag: "%s"\r\n' % self.mode.encode()
        conn.sendall(b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n" % (etag, len(body)))
        if request.startswith(b"HEAD"):
            return
        if self.mode in ("ok", "no-etag"):
            conn.sendall(body)
        elif self.mode == "truncate":
            conn.sendall(body[: len(body) // 2])
        else:
            conn.sendall(body[:1000])
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\1\0\0\0\0\0\0\0")


@pytest.mark.parametrize("mode", ["truncate", "reset"])
def test_an_s3_store_dying_mid_download_is_one_line_or_the_last_good_copy(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    mode: str,
) -> None:
    pytest.importorskip("boto3")
    store = _DyingS3(built[0])
    aws = {
        "AWS_ENDPOINT_URL": store.endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    env = dict(warm.env, WARM_HOME=str(tmp_path / "home"), **aws)
    url = "s3://fleet/b.warm"
    try:
        store.mode = mode
        proc = warm.with_env(**env)("stats", url)  # no last good copy: one line, exit 2
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        store.mode = "ok"
        assert warm.with_env(**env)("stats", url).returncode == 0
        store.mode = mode  # changed, and cut short: production serves the last good copy
        served = subprocess.run(
            [sys.executable, "-c", PRODUCE],
            capture_output=True,
            text=True,
            env=dict(env, WARM_BUNDLE=url),
            cwd=ROOT,
            timeout=120,
        )
    finally:
        store.server.close()
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout) == {"kernels": 0, "tunes": 0}
    assert served.stderr.count("RemoteBundleWarning") == 1 and "last good copy" in served.stderr
    assert not list((tmp_path / "home" / "remote").glob("*/*.tmp"))


def test_a_download_lock_held_elsewhere_is_waited_for_no_longer_than_the_deadline(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from filelock import FileLock

    store, base, _ = http_store
    store.files["/b.warm"] = built[0]
    url, home = f"{base}/b.warm", tmp_path / "home"
    env = dict(warm.env, WARM_HOME=str(home), WARM_REMOTE_DEADLINE="1")
    monkeypatch.setenv("WARM_HOME", str(home))
    folder = cache_dir(url)
    folder.mkdir(parents=True, mode=0o700)
    with FileLock(str(folder / "lock")):  # another process, stopped mid-download
        began = time.monotonic()
        proc = warm.with_env(**env)("stats", url, timeout=60)  # no copy yet: one line
        took = time.monotonic() - began
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert took < 8, took
    assert warm.with_env(**env)("stats", url).returncode == 0  # a last good copy
    store.files["/b.warm"] = built[1]
    with FileLock(str(folder / "lock")):
        began = time.monotonic()
        served = subprocess.run(
            [sys.executable, "-c", PRODUCE],
            capture_output=True,
            text=True,
            env=dict(env, WARM_BUNDLE=url),
            cwd=ROOT,
            timeout=60,
        )
        took = time.monotonic() - began
    assert served.returncode == 0, served.stderr
    assert json.loads(served.stdout) == {"kernels": 0, "tunes": 0} and took < 8, took
    assert served.stderr.count("RemoteBundleWarning") == 1 and "last good copy" in served.stderr


def test_a_deadline_beyond_any_clock_is_no_error_in_a_thread(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    store, base, _ = http_store
    store.files["/b.warm"] = built[0]
    env = dict(warm.env, WARM_HOME=str(tmp_path / "home"), WARM_REMOTE_DEADLINE="1e300")
    proc = warm.with_env(**env)("stats", f"{base}/b.warm")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_not_modified_to_a_request_for_the_whole_bundle_is_one_line_naming_the_url(
    warm: Warm, tmp_path: Path
) -> None:
    store = _Answers(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 0\r\n\r\n")
    env = dict(warm.env, WARM_HOME=str(tmp_path / "home"))
    try:
        target = tmp_path / "x.warm"
        procs = [
            warm.with_env(**env)(*a) for a in (("stats", store.url), ("pull", store.url, target))
        ]
        served = production_runtime(env, store.url, tmp_path)
    finally:
        store.server.close()
    for proc in procs:
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert store.url in proc.stderr and "304" in proc.stderr, proc.stderr
    assert served.stdout.startswith("RemoteError") and "304" in served.stdout, served.stderr
    assert list(tmp_path.glob("x.warm*")) == []


def test_an_s3_store_that_drips_its_headers_stops_at_the_deadline(
    warm: Warm, tmp_path: Path
) -> None:
    """botocore reads the answer on sockets warm cannot shut: the exchange runs in a
    thread given up on at the deadline (`remote_s3.S3._within`)."""
    pytest.importorskip("boto3")
    server, stop = socket.create_server(("127.0.0.1", 0)), threading.Event()

    def drip() -> None:  # each request: the HEAD, then the GET
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with contextlib.suppress(OSError), conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Drip: ")
                while not stop.wait(0.5):  # until the test ends: past its 180 s timeout
                    conn.sendall(b"a")

    threading.Thread(target=drip, daemon=True).start()
    env = dict(
        warm.env,
        WARM_HOME=str(tmp_path / "home"),
        WARM_REMOTE_DEADLINE="1",
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{server.getsockname()[1]}",
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_DEFAULT_REGION="us-east-1",
    )
    began = time.monotonic()
    try:
        proc = warm.with_env(**env)("stats", "s3://fleet/b.warm", timeout=180)
    finally:
        stop.set()
        server.close()
    took = time.monotonic() - began
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    # a 1 s deadline, process start and boto3's import under a loaded machine's 2 cores (7.8 s
    # at a load of 12, 16.7 s at 20): far under the 180 s timeout the store drips past
    assert "WARM_REMOTE_DEADLINE" in proc.stderr and took < 60, (took, proc.stderr)
    assert not list((tmp_path / "home" / "remote").glob("*/*.tmp"))


def test_an_s3_store_that_names_no_etag_is_served_by_its_sha256(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
) -> None:
    pytest.importorskip("boto3")
    store = _DyingS3(built[0])
    store.mode = "no-etag"
    env = dict(
        warm.env,
        WARM_HOME=str(tmp_path / "home"),
        AWS_ENDPOINT_URL=store.endpoint,
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_DEFAULT_REGION="us-east-1",
    )
    try:
        pulled = [
            warm.with_env(**env)("pull", "s3://fleet/b.warm", tmp_path / f"p{i}.warm")
            for i in (0, 1)
        ]
    finally:
        store.server.close()
    for i, proc in enumerate(pulled):
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert (tmp_path / f"p{i}.warm").read_bytes() == built[0]


def test_a_refused_download_is_named_by_its_url_not_a_removed_temporary_file(
    warm: Warm,
    tmp_path: Path,
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    store, base, _ = http_store
    store.files["/b.warm"] = b"<html>not a bundle</html>"
    proc = warm.with_env(WARM_HOME=str(tmp_path / "home"))("stats", f"{base}/b.warm")
    assert proc.returncode == 2 and "download refused" in proc.stderr, proc.stderr
    assert ".tmp" not in proc.stderr and str(tmp_path) not in proc.stderr, proc.stderr
