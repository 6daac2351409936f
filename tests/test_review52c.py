"""A hostile review of remote stores and their secrets (review52c), against real servers on
127.0.0.1 (test_review42d's `Server`) and the real CLI.

What it found:
- a host no lookup takes (`https://a..b/`, a label over 63 characters, `%E2%82%AC.example`
  decoding to no ASCII), named by the URL, by a store's redirect or by the environment's
  proxy (`https_proxy=http://a..b:3128`), raised `UnicodeError` out of urlopen: a traceback
  from `warm pull`, and in production no `RemoteError`, so no last good copy was served;
- botocore names its endpoint whole in an error (`Could not connect to the endpoint URL:
  "http://u:pass@host/..."`): `AWS_ENDPOINT_URL`'s password reached the error line;
- a header http.client refuses is echoed whole (`Invalid header value b'...'`): an
  `AWS_SESSION_TOKEN` read from a CRLF file (its CR kept) reached the error line whole;
- a URL with a slash too many (`https:///u:pass@host/b.warm`) is read as naming no host,
  its credentials in its path: `shown` showed them, in the refusal that it names no host;
- urllib adds the environment's proxy's `Proxy-Authorization` as any header, and a redirect
  copies every header: one to a host reached without the proxy (this machine, a `no_proxy`
  host) was sent the proxy's password directly;
- a name lookup is no socket a `Deadline` shuts: a resolver that never answers held an
  https:// download past `WARM_REMOTE_DEADLINE` (15 s under `WARM_REMOTE_DEADLINE=1`,
  `timeout:5 attempts:3`), where an `s3://` one's thread stopped at it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_remote_redirects import _certificate
from test_review42d import Server, body, servers  # noqa: F401  (fixtures)

from warmcli.bundle.location import shown, url_text
from warmcli.bundle.remote import fetch, push
from warmcli.errors import RemoteError

_NO_LOOKUP = ("https://a..b/x.warm", f"https://{'x' * 64}.example/x.warm")


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A WARM_HOME of the test's own, and no proxy the environment names."""
    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_a_host_no_lookup_takes_is_refused_in_one_line(
    warm: Warm,
    home: Path,
    tmp_path: Path,
    body: bytes,  # noqa: F811
    servers: list[Server],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for url in (*_NO_LOOKUP, "https://%E2%82%AC.example/x.warm"):
        with pytest.raises(RemoteError, match="no name a lookup takes"):
            url_text(url)
    proc = warm("pull", _NO_LOOKUP[0], tmp_path / "x.warm")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "no name a lookup takes" in proc.stderr, proc.stderr
    # a store that redirects there: its last good copy is served, as for any store that fails
    store = Server(body)
    servers.append(store)
    assert fetch(store.base + "/b.warm").downloaded
    for to in _NO_LOOKUP:
        store.routes["/b.warm"] = to
        got = fetch(store.base + "/b.warm")
        assert not got.downloaded and "refused" in str(got.warning), got.warning
    # the environment's proxy: the store is unreachable, said in one line
    monkeypatch.setenv("https_proxy", "http://a..b:3128")
    with pytest.raises(RemoteError, match=r"store unreachable.*no host name a lookup takes"):
        fetch("https://example.invalid/x.warm")


def _aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> None:
    """The AWS variables an `s3://` URL's client reads: `env` over test credentials, no
    profile or config file of this machine's; boto3's default session (which keeps the
    credentials it first read) made anew."""
    boto3 = pytest.importorskip("boto3")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.setenv(name, str(tmp_path / "none"))
    given = {"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "Sk9Secret"}
    for name, value in {**given, "AWS_DEFAULT_REGION": "us-east-1", **env}.items():
        monkeypatch.setenv(name, value)


def test_an_s3_endpoint_s_password_is_never_shown(
    home: Path,
    tmp_path: Path,
    body: bytes,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """botocore names its endpoint whole (`Could not connect to the endpoint URL:
    "http://u:pass@host/..."`, `Invalid endpoint: ...`): said as every URL is shown."""
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(body)
    for endpoint in ("http://u:Ep9Secret@127.0.0.1:9", "https://u:Ep9Secret@a..b"):
        _aws(monkeypatch, tmp_path, AWS_ENDPOINT_URL=endpoint)
        for act in (lambda: fetch("s3://bkt/b.warm"), lambda: push(bundle, "s3://bkt/b.warm")):
            with pytest.raises(RemoteError) as refused:
                act()
            assert "Ep9Secret" not in str(refused.value), refused.value
            assert "u:***@" in str(refused.value), refused.value


def test_a_credential_no_header_takes_is_never_shown(
    home: Path,
    tmp_path: Path,
    body: bytes,  # noqa: F811
    servers: list[Server],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A session token read from a file of CRLF lines keeps its CR: http.client refuses the
    header, echoing its value whole (`Invalid header value b'...'`), as it does the
    `Authorization` (key id and signature) of an access key id holding a line break."""
    store = Server(body)
    servers.append(store)
    for given in ({"AWS_SESSION_TOKEN": "Tk9Secret\r"}, {"AWS_ACCESS_KEY_ID": "AKIDX\n"}):
        _aws(monkeypatch, tmp_path, AWS_ENDPOINT_URL=store.base, **given)
        with pytest.raises(RemoteError, match=r"Invalid header value \(not shown") as refused:
            fetch("s3://bkt/b.warm")
        assert "Tk9Secret" not in str(refused.value), refused.value
        assert "Signature" not in str(refused.value), refused.value
    assert store.seen == []  # (refused before it was sent)


def test_a_password_after_a_slash_too_many_is_never_shown(warm: Warm, tmp_path: Path) -> None:
    """`https:///u:pass@host/b.warm` (a base URL joined to a path with its `/`): a URL
    naming no host, refused so, its netloc read as empty and the password in its path."""
    for url in ("https:///u:Pw9Secret@h/b.warm", "https:////u:Pw9Secret@h/b.warm"):
        assert shown(url) == url.replace("Pw9Secret", "***"), shown(url)
        with pytest.raises(RemoteError, match="names no host") as refused:
            url_text(url)
        assert "Pw9Secret" not in str(refused.value), refused.value
    proc = warm("pull", "https:///u:Pw9Secret@h/b.warm", tmp_path / "x.warm")
    assert proc.returncode == 2 and "names no host" in proc.stderr, proc.stderr
    assert "Pw9Secret" not in proc.stderr, proc.stderr
    assert shown("https:///") == "https:///" and shown("s3:///a/b") == "s3:///a/b"


class _Tunnel(socketserver.ThreadingTCPServer):
    """A proxy on 127.0.0.1 that answers any `CONNECT` (its request kept in `asked`) with a
    tunnel to `to`, a port of this machine, whatever host the request names."""

    daemon_threads = True

    def __init__(self, to: int) -> None:
        self.to, self.asked = to, []  # type: list[bytes]
        super().__init__(("127.0.0.1", 0), _Tunneled)


class _Tunneled(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        asked = b""
        while b"\r\n\r\n" not in asked and (got := self.request.recv(1)):
            asked += got
        self.server.asked.append(asked)  # type: ignore[attr-defined]
        upstream = socket.create_connection(("127.0.0.1", self.server.to))  # type: ignore[attr-defined]
        self.request.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        back = threading.Thread(target=_pipe, args=(upstream, self.request), daemon=True)
        back.start()
        _pipe(self.request, upstream)
        back.join()


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := source.recv(1 << 16):
            sink.sendall(data)
    for end in (source, sink):
        with contextlib.suppress(OSError):
            end.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def proxied_store(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[int, _Tunnel, list[dict[str, str]]]]:
    """An https:// store on 127.0.0.1 (its certificate also for `store.example`, trusted
    through SSL_CERT_FILE) that redirects /go to its own /b.warm by 127.0.0.1 (/again: by
    `store.example`, through the proxy again); the
    environment's `https_proxy`, with a password, a tunnel to it; the headers of each
    request the store took."""
    cert, key = _certificate(tmp_path, ("store.example",))
    heard: list[dict[str, str]] = []

    class Store(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            heard.append(dict(self.headers))
            port = self.server.server_address[1]
            host = {"/go": "127.0.0.1", "/again": "store.example"}.get(self.path)
            self.send_response(302 if host else 404)
            self.send_header("Location", f"https://{host}:{port}/b.warm")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    store = ThreadingHTTPServer(("127.0.0.1", 0), Store)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    store.socket = context.wrap_socket(store.socket, server_side=True)
    tunnel = _Tunnel(store.server_address[1])
    for server in (store, tunnel):
        threading.Thread(target=server.serve_forever, daemon=True, args=(0.05,)).start()
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    monkeypatch.setenv("https_proxy", f"http://u:Px9Secret@127.0.0.1:{tunnel.server_address[1]}")
    yield store.server_address[1], tunnel, heard
    for server in (store, tunnel):
        server.shutdown()
        server.server_close()


# http.client asks a tunnel in HTTP/1.1 from 3.12 (its connection's version), 1.0 before.
CONNECT_VERSION = "HTTP/1.0" if sys.version_info < (3, 12) else "HTTP/1.1"


def test_a_redirect_past_the_proxy_takes_not_its_password(
    proxied_store: tuple[int, _Tunnel, list[dict[str, str]]],
) -> None:
    """urllib adds the proxy's `Proxy-Authorization` to the request as any header, and a
    redirect copies them all: one to a host the proxy is not asked for (this machine's, a
    `no_proxy` one) was sent it, the proxy's password, directly."""
    port, tunnel, heard = proxied_store
    with pytest.raises(RemoteError, match="no bundle there"):
        fetch(f"https://store.example:{port}/go")
    assert [a.split(b"\r\n")[0] for a in tunnel.asked] == [
        f"CONNECT store.example:{port} {CONNECT_VERSION}".encode()
    ]
    assert b"Proxy-Authorization: Basic" in tunnel.asked[0]  # (the proxy's own, there)
    assert [h.get("Host") for h in heard] == [f"store.example:{port}", f"127.0.0.1:{port}"]
    assert [h.get("Proxy-Authorization") for h in heard] == [None, None], heard
    # a redirect through the proxy again: the proxy is still sent its password
    with pytest.raises(RemoteError, match="no bundle there"):
        fetch(f"https://store.example:{port}/again")
    assert len(tunnel.asked) == 3 and all(b"Proxy-Authorization: Basic" in a for a in tunnel.asked)
    assert all("Proxy-Authorization" not in h for h in heard), heard


# Run in a network and mount namespace of its own (`unshare -rmn`), its /etc/resolv.conf one
# naming a server on its loopback that never answers: a fetch under WARM_REMOTE_DEADLINE=1.
_NO_ANSWER = """
import fcntl, socket, struct, time
probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # this namespace's loopback up
flags = struct.unpack("16sh", fcntl.ioctl(probe, 0x8913, struct.pack("16sh", b"lo", 0)))[1]
fcntl.ioctl(probe, 0x8914, struct.pack("16sh", b"lo", flags | 1))
server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
server.bind(("127.0.0.53", 53))  # asked, never answering
from warmcli.bundle.remote import fetch
started = time.monotonic()
try:
    fetch("https://store.invalid/b.warm")
except Exception as exc:
    print(exc)
print(time.monotonic() - started)
"""


def test_a_name_lookup_never_answered_stops_at_the_deadline(tmp_path: Path) -> None:
    unshare = shutil.which("unshare")
    if unshare is None or not os.path.exists("/etc/resolv.conf"):
        pytest.skip("no unshare, or no /etc/resolv.conf to mount over")
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.53\noptions timeout:5 attempts:3\n")
    env = dict(os.environ, WARM_HOME=str(tmp_path / "home"), WARM_REMOTE_DEADLINE="1")
    mounted = 'mount --bind "$1" /etc/resolv.conf && exec "$2" -c "$3"'
    given = [unshare, "-rmn", "sh", "-c", mounted, "sh", resolv, sys.executable, _NO_ANSWER]
    proc = subprocess.run(given, capture_output=True, text=True, env=env, timeout=120)
    if proc.returncode != 0 or "Name or service not known" in proc.stdout:
        pytest.skip(f"no namespace of its own, or a lookup past resolv.conf: {proc.stderr}")
    said, took = proc.stdout.splitlines()
    assert "download stopped: not done in 1 s" in said, said
    assert float(took) < 8, took  # (the resolver's own wait: 15 s)
