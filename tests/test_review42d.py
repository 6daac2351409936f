"""A review of URL credentials (remote42), against real HTTP servers on 127.0.0.1.

A password holding `/`, `?` or `#` unencoded is never shown (its URL refused in one line);
a percent-escape in credentials is sent as the byte it names (`%FF` is 0xFF, as curl sends
it); a redirect to a scheme urllib refuses itself is refused naming its target as shown;
credentials never come back after a redirect chain leaves their origin and returns to it;
a proxy from the environment never sees a request to this machine (nor its credentials);
a refusal noted by an earlier warm, naming the URL whole, is never said again.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.bundle.http_open import redirect_refused
from warmcli.bundle.location import kept_as, shown, url_text
from warmcli.bundle.store import Bundle
from warmcli.errors import RemoteError


class Server:
    """One server on 127.0.0.1: `routes` maps a path to a redirect's Location (a callable
    of the servers' bases) or serves `body`; each request is kept as (path, Authorization);
    404 with no body where `body` is None."""

    def __init__(self, body: bytes | None, routes: dict[str, Any] | None = None) -> None:
        self.body, self.routes = body, routes or {}
        self.seen: list[tuple[str, str | None]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True, args=(0.05,)).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            server.seen.append((self.path, self.headers.get("Authorization")))
            to = server.routes.get(self.path.partition("?")[0])
            if to is not None:
                self.send_response(302)
                self.send_header("Location", to() if callable(to) else to)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = server.body or b""
            etag = '"' + str(hash(body)) + '"'
            if self.headers.get("If-None-Match") == etag:
                self.send_response(304)
                self.end_headers()
                return
            self.send_response(200 if server.body is not None else 404)
            self.send_header("ETag", etag)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def body(tmp_path: Path) -> bytes:
    with Bundle.create(tmp_path / "made.warm"):
        pass
    return (tmp_path / "made.warm").read_bytes()


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    made: list[Server] = []
    yield made
    for server in made:
        server.close()


def _basic(raw: bytes) -> str:
    return "Basic " + base64.b64encode(raw).decode()


def test_a_password_holding_slash_question_or_hash_is_never_shown(
    warm: Warm, tmp_path: Path
) -> None:
    for url in (
        "https://u:Zq9/Wk7@127.0.0.1:9/b.warm",
        "https://u:Zq9?Wk7@127.0.0.1:9/b.warm?sig=1",
        "https://u:Zq9#Wk7@127.0.0.1:9/b.warm",
        "https://u:/Wk7@127.0.0.1:9/b.warm",
    ):
        assert "Zq9" not in shown(url) and "Wk7" not in shown(url), shown(url)
        assert shown(url).startswith("https://u:***@127.0.0.1:9/b.warm"), shown(url)
        with pytest.raises(RemoteError, match="percent-encode it") as refused:
            url_text(url)
        assert "Zq9" not in str(refused.value) and "Wk7" not in str(refused.value)
        proc = warm("pull", url, tmp_path / "x.warm")
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "Zq9" not in proc.stderr and "Wk7" not in proc.stderr, proc.stderr
    # a port alone that is no number is still said so; a path holding `@` is as it is
    assert shown("https://h:abc/b.warm") == "https://h:abc/b.warm"
    assert shown("https://h:8/p@th/b.warm") == "https://h:8/p@th/b.warm"
    assert shown("https://[::1]:8/x@y") == "https://[::1]:8/x@y"


def test_credentials_are_sent_as_the_bytes_they_name(
    warm: Warm, tmp_path: Path, body: bytes, servers: list[Server]
) -> None:
    store = Server(body)
    servers.append(store)
    host = store.base.removeprefix("http://")
    cases = [
        ("u:p%FFq", b"u:p\xffq"),  # no UTF-8: the byte itself, as curl sends it
        ("u:%C3%A9", "u:é".encode()),
        ("u:a%00b%0Ac", b"u:a\x00b\nc"),  # inert inside base64
        ("u:a:b", b"u:a:b"),  # a `:` in the password
        (":pass", b":pass"),  # an empty user
        ("u:" + "x" * 10_000, b"u:" + b"x" * 10_000),
    ]
    for n, (userinfo, raw) in enumerate(cases):
        proc = warm("pull", f"http://{userinfo}@{host}/b.warm", tmp_path / f"{n}.warm")
        assert proc.returncode == 0, proc.stderr
        assert store.seen[-1][1] == _basic(raw), (userinfo, store.seen[-1][1][:40])
        assert userinfo.partition(":")[2][:8] not in proc.stdout + proc.stderr


def test_a_redirect_chain_and_a_redirect_to_another_scheme(
    warm: Warm, tmp_path: Path, body: bytes, servers: list[Server]
) -> None:
    first, other = Server(body), Server(body)
    servers += [first, other]
    first.routes["/go"] = lambda: other.base + "/back"
    other.routes["/back"] = lambda: first.base + "/b.warm"
    first.routes["/gopher"] = "gopher://u:Zq9Wk7@elsewhere/b.warm?X-Amz-Signature=SIGq"
    first.routes["/file"] = "file:///etc/passwd?sig=SIGq"
    first.routes["/broken"] = "http://[x/b.warm?sig=SIGq"
    host = first.base.removeprefix("http://")
    # same origin -> another -> back: the credentials are not sent again (as requests does)
    proc = warm("pull", f"http://u:Zq9Wk7@{host}/go", tmp_path / "chain.warm")
    assert proc.returncode == 0, proc.stderr
    assert first.seen == [("/go", _basic(b"u:Zq9Wk7")), ("/b.warm", None)], first.seen
    assert other.seen == [("/back", None)], other.seen
    for path in ("/gopher", "/file", "/broken"):
        proc = warm("pull", f"http://u:Zq9Wk7@{host}{path}?sig=SIGq", tmp_path / "x.warm")
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "refused" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
        assert "Zq9" not in proc.stderr and "SIGq" not in proc.stderr, proc.stderr
    assert redirect_refused("http://127.0.0.1/a", "ftp://127.0.0.1/b") is not None


def test_a_proxy_never_sees_a_request_to_this_machine(
    warm: Warm, tmp_path: Path, body: bytes, servers: list[Server]
) -> None:
    """Plain http:// is taken for this machine only, as it stays here: a proxy named by
    `http_proxy` (no `no_proxy`) would get the bundle in plain text, and the password."""
    store, proxy = Server(body), Server(b"proxied")
    servers += [store, proxy]
    env = {k: v for k, v in warm.env.items() if k.lower() != "no_proxy"}
    proxied = Warm(dict(env, http_proxy=proxy.base, HTTP_PROXY=proxy.base))
    host = store.base.removeprefix("http://")
    for where in (host, host.replace("127.0.0.1", "localhost")):
        proc = proxied("pull", f"http://u:Zq9Wk7@{where}/b.warm", tmp_path / "p.warm")
        assert proc.returncode == 0, proc.stderr
    assert proxy.seen == [], proxy.seen
    assert [s[1] for s in store.seen] == [_basic(b"u:Zq9Wk7")] * 2


def test_a_refusal_noted_by_an_earlier_warm_is_never_said_again(
    warm: Warm, tmp_path: Path, body: bytes, servers: list[Server]
) -> None:
    """Stop 41's warm noted a refused download with the URL whole (`?key=` and all); a
    note that does not name the URL as it is shown now is not believed: asked afresh."""
    store = Server(body)
    servers.append(store)
    url = store.base + "/b.warm?key=APIKEY42"
    assert warm("pull", url, tmp_path / "a.warm").returncode == 0
    store.body = b"no bundle"
    proc = warm("stats", url)
    assert "using the last good copy" in proc.stderr and "APIKEY42" not in proc.stderr
    (meta_path,) = (Path(warm.env["WARM_HOME"]) / "remote").glob("*/meta.json")
    meta = json.loads(meta_path.read_text())
    assert meta["refused_why"].startswith(shown(url) + ": download refused: ")
    meta["refused_why"] = meta["refused_why"].replace(shown(url), url)  # as stop 41 wrote it
    meta_path.write_text(json.dumps(meta))
    proc = warm("stats", url)
    assert "using the last good copy" in proc.stderr, proc.stderr
    assert "APIKEY42" not in proc.stderr, proc.stderr
    assert "APIKEY42" not in meta_path.read_text()  # noted anew, as shown


def test_a_legacy_or_sas_field_is_a_signature_only_beside_the_field_that_signs_it() -> None:
    """Pure logic (fakes: no store): `?sp=a.warm` and `?sp=b.warm` name two objects, two
    kept copies; beside `sig` (an Azure SAS), `sp` is signed anew with it: one copy."""
    assert kept_as("https://h/get?sp=a.warm") != kept_as("https://h/get?sp=b.warm")
    assert kept_as("https://h/get?Expires=a") != kept_as("https://h/get?Expires=b")
    assert kept_as("https://h/b.warm?sv=1&sp=r&se=2&SIG=x&name=a") == "https://h/b.warm?name=a"
    signed = "https://h/b.warm?Expires={}&Signature={}&AWSAccessKeyId=k&versionId=4"
    assert kept_as(signed.format(1, 2)) == kept_as(signed.format(3, 4))
    assert kept_as(signed.format(1, 2)) == "https://h/b.warm?versionId=4"
    # always a signature's: X-Amz-*, X-Goog-*, a token, whatever else is there
    assert kept_as("https://h/b.warm?X-Goog-Expires=1&token=t&sp=a") == "https://h/b.warm?sp=a"
