"""Object stores under a hostile or slow server (remote46), against raw servers on 127.0.0.1
started and stopped by each test, and the real CLI (forked, `tests/forked_cli.py`: one
server whatever store's AWS_ENDPOINT_URL a test names, `tests/forked_tool_env.py`).

`warm push`'s upload is bounded by `WARM_REMOTE_DEADLINE` in all, `https://` as `s3://`: a
store that reads the PUT's body slowly (64 kB a `DRIP`) stops it there (one line, exit 2, the
old object kept: the body never sent whole), as does one that drips the PUT's TLS handshake.
A `Content-Length` of 5,000 digits is one line (it was a ValueError traceback), as is an S3
`Last-Modified` botocore cannot place (a RuntimeError traceback); an S3 error
body announced as 4 GB is read 1 MiB at most (it was read whole into memory); what a store
states (a sha256) or a downloaded bundle says in a refusal reaches production inert. Guards
that held already: a store that kept less than the PUT it answered 200 to is never pulled,
and a push redirected to another host takes no credentials there.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
from big_bundle import build_big
from conftest import Warm
from forked_tool_env import forked_tool_warm
from raw_store import RawStore, warm_waiting

from warmcli.bundle.remote import RemoteError, fetch

DRIP = 0.2  # seconds between the bytes a slow store reads or sends
DRIPS = 200  # then it stops: 40 s, far past a deadline of 1 s (and a loaded machine's 30)
OLD = b"the old object"


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sound bundle of 15 MB: more than a slow store takes in `DRIPS`. Its size is what
    counts: kernel rows only (~1 s to write; 20,000 tunes took 6 s for 6.7 MB)."""
    return build_big(tmp_path_factory.mktemp("big") / "big.warm", 36000, 0)


def _fields(head: bytes) -> dict[bytes, bytes]:
    lines = head.lower().split(b"\r\n")[1:]
    return {k.strip(): v.strip() for k, _, v in (line.partition(b":") for line in lines)}


class _SlowReader(RawStore):
    """An object store (`https://`'s PUT, or S3's path-style one) holding `OLD`, whose
    HEAD answers at once and whose PUT's body it reads 64 kB every `DRIP` s (each of the
    client's writes taken well within its wait: 320 kB/s), `DRIPS` times, then hangs up;
    a body read whole would replace the object."""

    threaded = True

    def __init__(self) -> None:
        self.held, self.received = OLD, 0
        super().__init__()
        self.server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)

    def answer(self, conn: socket.socket, request: bytes) -> None:
        head, _, body = request.partition(b"\r\n\r\n")
        if request.startswith(b"HEAD"):
            conn.sendall(
                b'HTTP/1.1 200 OK\r\nETag: "old"\r\nContent-Length: 14\r\nConnection: close\r\n\r\n'
            )
            return
        fields = _fields(head)
        if fields.get(b"expect") == b"100-continue":
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        size, got = int(fields[b"content-length"]), len(body)
        for _ in range(DRIPS):
            if got >= size:
                break
            time.sleep(DRIP)
            read = conn.recv(65536)
            if not read:  # the client hung up (its deadline)
                break
            got += len(read)
        self.received = got
        if got >= size:
            self.held = b"new"
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")


# conftest's `warm`, forked: one server whatever store endpoint a test names, not one a test
tool_servers, warm = forked_tool_warm("AWS_ENDPOINT_URL")


def _aws(store: RawStore, home: Path, **more: str) -> dict[str, str]:
    return {
        "WARM_HOME": str(home),
        "AWS_ENDPOINT_URL": store.endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        **more,
    }


def _stopped(proc: object, took: float, bound: float) -> None:
    out, err, code = proc.stdout, proc.stderr, proc.returncode  # type: ignore[attr-defined]
    assert code == 2 and err.count("\n") == 1, out + err
    assert "not pushed" in err and "WARM_REMOTE_DEADLINE" in err, err
    assert took < bound, (took, err)


@pytest.mark.parametrize("scheme", ["https", "s3"])
def test_a_store_reading_the_upload_slowly_stops_the_push_at_the_deadline(
    warm: Warm, tmp_path: Path, big: Path, scheme: str
) -> None:
    """On main the upload had no deadline: the push waited for the store (for as long
    as it likes: `DRIPS`), then said "store unreachable"."""
    if scheme == "s3":
        pytest.importorskip("boto3")
    before = big.read_bytes()
    store = _SlowReader()
    url = store.url if scheme == "https" else "s3://fleet/b.warm"
    env = _aws(store, tmp_path / "home", WARM_REMOTE_DEADLINE="1")
    try:
        began = time.monotonic()
        proc = warm.with_env(**env)("push", big, url, timeout=60)
        took = time.monotonic() - began
    finally:
        store.close()
    # The message names the deadline (main's said "store unreachable" after the store's
    # 8 s); the wall bound only says it did not wait for ever: boto3's import alone took
    # 14 s of it at a load of 15 (CI's fresh clone beside six helpers).
    _stopped(proc, took, 30)
    assert store.held == OLD and store.received < big.stat().st_size
    assert big.read_bytes() == before  # nothing local lost


class _DripPutHandshake(RawStore):
    """An https:// store whose HEAD (plain, refused: not TLS) fails at once, then whose
    PUT's connection drips its TLS handshake: a record header of 16 kB, a byte a `DRIP`,
    until it is closed (the record whole only after 55 minutes): a push not stopped at its
    deadline waits for it until the test's timeout, however slow the machine."""

    threaded = True

    def __init__(self) -> None:
        self.stop, self.connections = threading.Event(), 0
        super().__init__()
        self.url = self.url.replace("http://", "https://", 1)

    def answer(self, conn: socket.socket, request: bytes) -> None:
        self.connections += 1
        if self.connections == 1:  # the HEAD: no TLS, the push goes on to its PUT
            return
        conn.sendall(b"\x16\x03\x03\x40\x00")
        for _ in range(0x4000 - 1):  # one byte short of the record: never a whole handshake
            if self.stop.wait(DRIP):
                return
            with contextlib.suppress(OSError):
                conn.sendall(b"\x02")

    def close(self) -> None:
        self.stop.set()
        super().close()


def test_a_put_whose_tls_handshake_drips_stops_at_the_deadline(
    warm: Warm, tmp_path: Path, big: Path
) -> None:
    """The PUT's TLS handshake waited 10 s (`TIMEOUT`), whatever the deadline: here warm's
    `TIMEOUT` is 600 s and the store drips for longer, so a push the deadline did not stop
    runs past the 180 s timeout. The wall bound only tells that from a push stopped at its
    1 s deadline (9.2 s at a load of 20 on 2 cores, against 10 s of `TIMEOUT` then)."""
    store = _DripPutHandshake()
    try:
        env = dict(warm.env, WARM_HOME=str(tmp_path / "home"), WARM_REMOTE_DEADLINE="1")
        began = time.monotonic()
        proc = warm_waiting(env, "push", big, store.url, wait=600, timeout=180)
        took = time.monotonic() - began
    finally:
        store.close()
    assert store.connections == 2, store.connections
    _stopped(proc, took, 60)


class _Says(RawStore):
    """A store on 127.0.0.1 answering every request with `said` (raw bytes); the requests
    it was sent in `asked`."""

    threaded = True

    def __init__(self, said: bytes) -> None:
        self.said, self.asked = said, []
        super().__init__()

    def answer(self, conn: socket.socket, request: bytes) -> None:
        self.asked.append(request)
        conn.sendall(self.said)


def test_a_length_of_thousands_of_digits_is_one_line_not_a_traceback(
    warm: Warm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Content-Length: 999...` (5,000 digits): Python makes no int of it (its 4,300-digit
    limit): `warm pull` was a ValueError traceback (exit 1), a production fetch raised it."""
    store = _Says(b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\nabc")
    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    try:
        proc = warm.with_env(WARM_HOME=str(tmp_path / "home"))("pull", store.url, tmp_path / "o")
        with pytest.raises(RemoteError) as caught:  # as production raises it
            fetch(store.url)
    finally:
        store.close()
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "bytes announced" in proc.stderr and len(proc.stderr) < 300, proc.stderr
    assert "bytes announced" in str(caught.value)
    assert not (tmp_path / "o").exists()


class _Flood(RawStore):
    """An S3 endpoint whose HEAD names an object (`verb` "pull") or none ("push"), and whose
    GET answers 500 (or PUT, its body taken, 200) announcing 4 GB of body, sending `FLOOD`
    MiB of it (as fast as loopback takes it), then hanging up."""

    threaded = True
    FLOOD = 200

    def __init__(self, verb: str) -> None:
        self.verb = verb
        super().__init__()

    def answer(self, conn: socket.socket, request: bytes) -> None:
        if request.startswith(b"HEAD"):
            there = b'200 OK\r\nETag: "e"\r\nContent-Length: 10'
            gone = b"404 Not Found\r\nContent-Length: 0\r\nConnection: close"
            conn.sendall(b"HTTP/1.1 %s\r\n\r\n" % (there if self.verb == "pull" else gone))
            return
        if request.startswith(b"PUT"):
            head, _, body = request.partition(b"\r\n\r\n")
            fields = _fields(head)
            if fields.get(b"expect") == b"100-continue":
                conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            while len(body) < int(fields[b"content-length"]) and (more := conn.recv(1 << 16)):
                body += more
        status = b"500 Oops" if self.verb == "pull" else b"200 OK"
        conn.sendall(b"HTTP/1.1 %s\r\nContent-Length: 4000000000\r\n\r\n<Error>" % status)
        chunk = b"a" * (1 << 20)
        for _ in range(self.FLOOD):
            conn.sendall(chunk)


@pytest.mark.parametrize("verb", ["pull", "push"])
def test_an_s3_answer_body_sets_no_memory(tmp_path: Path, verb: str) -> None:
    """botocore read an answer's body whole (an error's, a PUT's): `warm pull` peaked at
    ~3 GB in 3 s against a store announcing 4 GB of error (here: 2.4 GB for a flood of
    400 MB). Read 1 MiB at most."""
    pytest.importorskip("boto3")
    from big_bundle import peak_rss
    from conftest import ROOT

    bundle = build_big(tmp_path / "b.warm", 10, 10)
    store = _Flood(verb)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(_aws(store, tmp_path / "home", WARM_REMOTE_DEADLINE="5"), PYTHONPATH=str(ROOT))
    url = "s3://fleet/b.warm"
    given = [url, str(tmp_path / "o")] if verb == "pull" else [str(bundle), url]
    try:
        proc, peak = peak_rss([sys.executable, "-m", "warmcli", verb, *given], env, timeout=60)
    finally:
        store.close()
    assert proc.returncode in (0, 2) and proc.stderr.count("\n") <= 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert peak < 200, peak  # MiB: Python, boto3 and warm


def _evil_bundle(path: Path) -> bytes:
    """A bundle whose first blob's sha256 is named with terminal escapes (an OSC title, a
    BEL): `warm verify`'s integrity check refuses it, naming that text."""
    import sqlite3

    build_big(path, 10, 10)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(
            "UPDATE blobs SET sha256 = char(27) || ']0;owned' || char(7) || substr(sha256, 9) "
            "WHERE rowid = (SELECT min(rowid) FROM blobs)"
        )
        conn.commit()
    return path.read_bytes()


@pytest.mark.parametrize("hostile", ["stated-sha256", "bundle-text"])
def test_a_refusal_said_in_production_holds_no_terminal_escape(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hostile: str
) -> None:
    """What production raises or warns (no CLI escapes it there): the sha256 a store states
    (`X-Warm-Sha256: ESC]0;...BEL`) and a downloaded bundle's own text in the integrity
    check's refusal reached it raw (its terminal's title set, its screen cleared)."""
    if hostile == "stated-sha256":
        body = build_big(tmp_path / "b.warm", 10, 10).read_bytes()
        extra = b"X-Warm-Sha256: \x1b]0;owned\x07\x9b2J\r\n"
    else:
        body, extra = _evil_bundle(tmp_path / "b.warm"), b""
    head = b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n" % (extra, len(body))
    store = _Says(head + body)
    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    try:
        with pytest.raises(RemoteError) as caught:
            fetch(store.url)
    finally:
        store.close()
    text = str(caught.value)
    assert "download refused" in text and "owned" in text, text
    assert not any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in text), repr(text)


class _Keeps(RawStore):
    """An https:// store (plain, on this machine) that answers 200 to a PUT but keeps `kept`
    of its body (`"half"`, `"none"`), and serves it: under the sha256 the PUT stated where
    `stated`, with a `Content-Length` a kilobyte longer than it sends where `cut`."""

    threaded = True

    def __init__(self, kept: str, stated: bool, cut: bool) -> None:
        self.kept, self.stated, self.cut = kept, stated, cut
        self.body: bytes | None = None
        self.sha = b""
        super().__init__()

    def answer(self, conn: socket.socket, request: bytes) -> None:
        head, _, body = request.partition(b"\r\n\r\n")
        fields = _fields(head)
        if request.startswith(b"PUT"):
            while len(body) < int(fields[b"content-length"]):
                body += conn.recv(1 << 16)
            self.sha = fields[b"x-warm-sha256"]
            self.body = body[: len(body) // 2] if self.kept == "half" else None
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
            return
        if self.body is None:
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return
        said = b"X-Warm-Sha256: %s\r\n" % self.sha if self.stated else b""
        length = len(self.body) + (1024 if self.cut else 0)
        conn.sendall(b"HTTP/1.1 200 OK\r\n%sContent-Length: %d\r\n\r\n" % (said, length))
        if not request.startswith(b"HEAD"):
            conn.sendall(self.body)


@pytest.mark.parametrize(
    ("kept", "stated", "cut", "said"),
    [
        ("half", True, False, "differs from the stated"),
        ("half", False, False, "download refused"),
        ("half", False, True, "bytes received"),
        ("none", False, False, "no bundle there"),
    ],
    ids=["half-stated", "half", "half-cut", "nothing"],
)
def test_a_store_that_kept_less_than_it_took_is_never_pulled(
    warm: Warm, tmp_path: Path, kept: str, stated: bool, cut: bool, said: str
) -> None:
    """It answered 200 to the PUT: `warm push` says pushed (it cannot know); a later pull
    of what it kept is refused in one line (its sha256, its length, or the integrity
    check), nothing written where it was to go."""
    bundle = build_big(tmp_path / "b.warm", 10, 10)
    store = _Keeps(kept, stated, cut)
    home = warm.with_env(WARM_HOME=str(tmp_path / "home"))
    try:
        pushed = home("push", bundle, store.url)
        pulled = home("pull", store.url, tmp_path / "o.warm")
    finally:
        store.close()
    assert pushed.returncode == 0 and "pushed" in pushed.stdout, pushed.stdout + pushed.stderr
    assert pulled.returncode == 2 and pulled.stderr.count("\n") == 1, pulled.stderr
    assert said in pulled.stderr, pulled.stderr
    assert not (tmp_path / "o.warm").exists()
    assert not list((tmp_path / "home" / "remote").glob("*/bundle.warm"))


class _Elsewhere(RawStore):
    """Where a redirect leads: what it was asked, headers included (`asked`)."""

    threaded = True

    def __init__(self) -> None:
        self.asked: list[bytes] = []
        super().__init__()

    def answer(self, conn: socket.socket, request: bytes) -> None:
        self.asked.append(request.partition(b"\r\n\r\n")[0].lower())
        conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")


class _Redirects(_Says):
    """A store that takes a request whole (a PUT's body read), then answers 307 to `to`."""

    def __init__(self, to: bytes) -> None:
        super().__init__(b"HTTP/1.1 307 Moved\r\nLocation: %s\r\nContent-Length: 0\r\n\r\n" % to)

    def answer(self, conn: socket.socket, request: bytes) -> None:
        head, _, body = request.partition(b"\r\n\r\n")
        size = int(_fields(head).get(b"content-length", b"0"))
        while len(body) < size and (more := conn.recv(1 << 16)):
            body += more
        super().answer(conn, head)


def test_a_push_redirected_to_another_host_takes_no_credentials_there(
    warm: Warm, tmp_path: Path
) -> None:
    """The HEAD and the PUT answered 307 to another host (localhost, not 127.0.0.1): the
    HEAD followed without the URL's password, the PUT not followed (urllib redirects no
    upload): one line, exit 2, nothing sent elsewhere that names the credentials."""
    bundle = build_big(tmp_path / "b.warm", 10, 10)
    other = _Elsewhere()
    origin = _Redirects(b"http://localhost:%d/b.warm" % other.port)
    url = origin.url.replace("http://", "http://user:s3cret@", 1)
    try:
        proc = warm.with_env(WARM_HOME=str(tmp_path / "home"))("push", bundle, url)
    finally:
        origin.close()
        other.close()
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "s3cret" not in proc.stderr and "307" in proc.stderr, proc.stderr
    assert [r.split(b" ")[0] for r in origin.asked] == [b"HEAD", b"PUT"]
    assert all(b"authorization: basic" in r.lower() for r in origin.asked)
    assert other.asked and not any(b"authorization" in r for r in other.asked), other.asked
    assert not any(r.startswith(b"put") for r in other.asked)


class _S3Object(RawStore):
    """An S3 endpoint serving one object (`body`, ETag `etag`) with `Last-Modified` as
    `modified` says (raw bytes), and the header lines `extra`."""

    threaded = True

    def __init__(self, body: bytes) -> None:
        self.body, self.etag, self.modified = body, b"one", b"Wed, 21 Oct 2015 07:28:00 GMT"
        self.extra = b""  # more header lines
        super().__init__()

    def answer(self, conn: socket.socket, request: bytes) -> None:
        head = b'HTTP/1.1 200 OK\r\nETag: "%s"\r\nLast-Modified: %s\r\n%sContent-Length: %d\r\n\r\n'
        conn.sendall(head % (self.etag, self.modified, self.extra, len(self.body)))
        if not request.startswith(b"HEAD"):
            conn.sendall(self.body)


@pytest.mark.parametrize("modified", [b"99999999999999999999"])  # (1e400: the same)
def test_an_s3_date_botocore_cannot_place_is_one_line_or_the_last_good_copy(
    warm: Warm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, modified: bytes
) -> None:
    """`Last-Modified: 99999999999999999999` (or `1e400`): botocore raises RuntimeError
    ("Unable to calculate correct timezone offset"), which left `warm pull` and `warm
    push` as tracebacks (exit 1), and `fetch` (production's) raised it, a last good copy
    or not."""
    pytest.importorskip("boto3")
    body = build_big(tmp_path / "b.warm", 10, 10).read_bytes()
    store = _S3Object(body)
    for key, value in _aws(store, tmp_path / "home").items():
        monkeypatch.setenv(key, value)
    aws = warm.with_env(**_aws(store, tmp_path / "cli"))
    try:
        first = fetch("s3://fleet/b.warm")  # a last good copy
        store.etag, store.modified = b"two", modified
        again = fetch("s3://fleet/b.warm")
        pulled = aws("pull", "s3://fleet/b.warm", tmp_path / "o.warm")
        pushed = aws("push", tmp_path / "b.warm", "s3://fleet/b.warm")
    finally:
        store.close()
    assert first.downloaded and not again.downloaded and again.path == first.path
    assert again.warning and "unreadable" in again.warning, again.warning
    for proc in (pulled, pushed):
        assert proc.returncode in (0, 2) and "Traceback" not in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") <= 1, proc.stderr
    assert pulled.returncode == 2 and "unreadable" in pulled.stderr, pulled.stderr


@pytest.mark.parametrize("checksum", [b"x-amz-checksum-crc32: nan"])  # (any no base64)
def test_an_s3_checksum_that_is_no_base64_is_one_line_or_the_last_good_copy(
    warm: Warm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checksum: bytes
) -> None:
    """botocore checks a GET's body against the checksum its answer names: one that is no
    base64 raised binascii.Error (a ValueError) from the body's read, where warm took only
    OSError and botocore's own: `warm pull` a traceback, `fetch` raised it to production."""
    pytest.importorskip("boto3")
    body = build_big(tmp_path / "b.warm", 10, 10).read_bytes()
    store = _S3Object(body)
    for key, value in _aws(store, tmp_path / "home").items():
        monkeypatch.setenv(key, value)
    try:
        first = fetch("s3://fleet/b.warm")  # a last good copy
        store.etag, store.extra = b"two", checksum + b"\r\n"
        again = fetch("s3://fleet/b.warm")
        aws = warm.with_env(**_aws(store, tmp_path / "cli"))
        pulled = aws("pull", "s3://fleet/b.warm", tmp_path / "o.warm")
    finally:
        store.close()
    assert first.downloaded and not again.downloaded and again.path == first.path
    assert again.warning and "unreadable" in again.warning, again.warning
    assert pulled.returncode == 2 and pulled.stderr.count("\n") == 1, pulled.stderr
    assert "unreadable" in pulled.stderr, pulled.stderr


class _RefusesEarly(RawStore):
    """A store that reads a PUT's headers and answers 403 at once (an expired presigned
    URL), hanging up without reading its body; a HEAD: 404."""

    threaded = True

    def answer(self, conn: socket.socket, request: bytes) -> None:
        if request.startswith(b"HEAD"):
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return
        conn.sendall(b"HTTP/1.1 403 Request has expired\r\nContent-Length: 0\r\n\r\n")


def test_a_store_refusing_the_upload_before_its_body_is_said_as_it_answered(
    warm: Warm, tmp_path: Path, big: Path
) -> None:
    """It answered 403 and hung up while the body was sent: `warm push` said "store
    unreachable ([Errno 32] Broken pipe)", its answer unread. The answer is read now."""
    store = _RefusesEarly()
    try:
        proc = warm.with_env(WARM_HOME=str(tmp_path / "home"))("push", big, store.url)
    finally:
        store.close()
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "HTTP 403 Request has expired" in proc.stderr, proc.stderr


class _ResetsAnswer(RawStore):
    """An S3 endpoint holding nothing (HEAD: 404) whose PUT, its body taken, is answered
    200 with 5 kB of a 100 kB body, then the connection reset."""

    threaded = True

    def answer(self, conn: socket.socket, request: bytes) -> None:
        import struct

        if request.startswith(b"HEAD"):
            conn.sendall(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )
            return
        head, _, body = request.partition(b"\r\n\r\n")
        fields = _fields(head)
        if fields.get(b"expect") == b"100-continue":
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        while len(body) < int(fields[b"content-length"]) and (more := conn.recv(1 << 16)):
            body += more
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"a" * 5000)
        time.sleep(0.2)
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def test_an_s3_answer_reset_midway_is_one_line(warm: Warm, tmp_path: Path) -> None:
    """The answer cap reads a PUT's answer outside botocore's send: a reset there was
    urllib3's ProtocolError, a traceback (caught in review of this stop), as botocore says it."""
    pytest.importorskip("boto3")
    store = _ResetsAnswer()
    bundle = build_big(tmp_path / "b.warm", 10, 10)
    try:
        proc = warm.with_env(**_aws(store, tmp_path / "home"))("push", bundle, "s3://fleet/b.warm")
    finally:
        store.close()
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "store unreachable" in proc.stderr, proc.stderr
