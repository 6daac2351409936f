"""Credentials a bundle's URL names, against real HTTP servers on 127.0.0.1 started here.

`https://user:pass@host/b.warm` (or a token alone, `https://token@host/`) is sent as HTTP
Basic auth, as pip and curl do, to the URL's own origin only: a redirect to another port
(another origin) is followed without it. The password, the token and a URL's query (a
presigned URL's signature) appear in no output of any command, `--json` included, in no
line of a production process (`WARM_EXPLAIN`, its fall-back warning, `report()`), and in no
file name or content under `WARM_HOME`; a presigned URL signed anew is the same kept copy.
A port out of range or no number is a bad URL: one line, exit 2, nothing kept.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.bundle.http_open import redirect_refused
from warmcli.bundle.location import kept_as, shown, url_text
from warmcli.bundle.store import Bundle
from warmcli.errors import RemoteError

SECRET = "s3cr@t:pw"  # percent-encoded in the URL: `s3cr%40t%3Apw`
SIGNATURE = "SIGxyz0123456789"  # a presigned URL's signature, in its query
USER = "alice"


class Stores:
    """Two servers: `auth` serves `body` at /b.warm to Basic `USER:SECRET` only (401
    otherwise), redirects /away to `other`'s /b.warm and /same to its own /b.warm;
    `other` serves it to anyone. Each records (path, Authorization) of every request."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.seen: dict[str, list[tuple[str, str | None]]] = {"auth": [], "other": []}
        self.base: dict[str, str] = {}
        self.downloads = 0


def _handler(stores: Stores, name: str) -> type[BaseHTTPRequestHandler]:
    wanted = "Basic " + base64.b64encode(f"{USER}:{SECRET}".encode()).decode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.partition("?")[0]
            stores.seen[name].append((self.path, self.headers.get("Authorization")))
            if name == "auth" and path in ("/away", "/same"):
                to = stores.base["other"] if path == "/away" else stores.base["auth"]
                self.send_response(302)
                self.send_header("Location", to + "/b.warm")
                self.end_headers()
                return
            if name == "auth" and self.headers.get("Authorization") != wanted:
                self.send_error(401)
                return
            etag = '"' + hashlib.sha256(stores.body).hexdigest() + '"'
            if self.headers.get("If-None-Match") == etag:
                self.send_response(304)
                self.end_headers()
                return
            stores.downloads += 1
            self.send_response(200)
            self.send_header("ETag", etag)
            self.send_header("Content-Length", str(len(stores.body)))
            self.end_headers()
            self.wfile.write(stores.body)

        def do_HEAD(self) -> None:  # nothing there yet, to the credentials only
            stores.seen[name].append((self.path, self.headers.get("Authorization")))
            self.send_response(401 if self.headers.get("Authorization") != wanted else 404)
            self.end_headers()

        def do_PUT(self) -> None:
            stores.seen[name].append((self.path, self.headers.get("Authorization")))
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.headers.get("Authorization") != wanted:
                self.send_error(401)
                return
            stores.body = body
            self.send_response(201)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[Stores]:
    with Bundle.create(tmp_path / "made.warm"):
        pass
    found = Stores((tmp_path / "made.warm").read_bytes())
    running = []
    for name in ("auth", "other"):
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(found, name))
        found.base[name] = f"http://127.0.0.1:{server.server_address[1]}"
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
        running.append(server)
    yield found
    for server in running:
        server.shutdown()
        server.server_close()


def _url(stores: Stores, path: str = "/b.warm", query: str = "") -> str:
    host = stores.base["auth"].removeprefix("http://")
    return f"http://{USER}:s3cr%40t%3Apw@{host}{path}{query}"


def _no_secret(*texts: str) -> None:
    for text in texts:
        for secret in ("s3cr", "%40t", SIGNATURE, base64.b64encode(SECRET.encode()).decode()):
            assert secret not in text, text


def _home_holds_no_secret(home: Path) -> None:
    """No file name, nor any file's bytes, under `home` holds the password or signature."""
    for folder, dirs, files in os.walk(home):
        _no_secret(*dirs, *files)
        for name in files:
            _no_secret((Path(folder) / name).read_bytes().decode("latin-1"))


def test_credentials_reach_the_store_as_basic_auth_never_another_origin(
    stores: Stores, warm: Warm, tmp_path: Path
) -> None:
    url = _url(stores)
    proc = warm("pull", url, tmp_path / "got.warm")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "got.warm").read_bytes() == stores.body
    assert (
        stores.seen["auth"][-1][1]
        == "Basic "
        + base64.b64encode(
            f"{USER}:{SECRET}".encode()  # percent-decoded, as pip and curl read it
        ).decode()
    )
    assert f"pulled http://{USER}:***@127.0.0.1" in proc.stdout, proc.stdout
    _no_secret(proc.stdout, proc.stderr)
    # a redirect to the same origin keeps it; one to another port never gets it
    assert warm("pull", _url(stores, "/same"), tmp_path / "same.warm").returncode == 0
    assert stores.seen["auth"][-1] == ("/b.warm", stores.seen["auth"][0][1])
    proc = warm("pull", _url(stores, "/away"), tmp_path / "away.warm", "--json")
    assert proc.returncode == 0, proc.stderr
    assert stores.seen["other"] == [("/b.warm", None)]
    assert json.loads(proc.stdout)["url"] == f"http://{USER}:***@{stores.base['auth'][7:]}/away"
    _no_secret(proc.stdout, proc.stderr)
    # a push sends them with its HEAD and its PUT
    (tmp_path / "new.warm").write_bytes(stores.body)
    proc = warm("push", tmp_path / "new.warm", _url(stores, "/b.warm", "?X-Amz-Signature=1"))
    assert proc.returncode == 0, proc.stderr
    assert [s[1] for s in stores.seen["auth"][-2:]] == [stores.seen["auth"][0][1]] * 2
    assert f"to http://{USER}:***@" in proc.stdout and "?***" in proc.stdout, proc.stdout
    _no_secret(proc.stdout, proc.stderr)
    # without them (or with wrong ones), the store's 401 is said
    proc = warm("pull", stores.base["auth"] + "/b.warm", tmp_path / "no.warm")
    assert proc.returncode == 2 and "HTTP 401" in proc.stderr, proc.stderr
    _home_holds_no_secret(Path(warm.env["WARM_HOME"]))


def test_no_command_shows_the_password_or_the_query(
    stores: Stores, warm: Warm, tmp_path: Path
) -> None:
    url = _url(stores, query=f"?X-Amz-Signature={SIGNATURE}&X-Amz-Credential=AKIA")
    shown_as = f"http://{USER}:***@{stores.base['auth'][7:]}/b.warm?***"
    local = tmp_path / "local.warm"
    local.write_bytes(stores.body)
    runs = [
        ("stats", url),
        ("stats", url, "--json"),
        ("verify", url),
        ("verify", url, "--json"),
        ("check", url),
        ("check", url, "--json"),
        ("diff", url, local),
        ("diff", url, local, "--json"),
        ("merge", url, local, "-o", tmp_path / "m.warm", "--force"),
        ("merge", url, local, "-o", tmp_path / "m.warm", "--force", "--json"),
        ("merge", local, "-o", url),
        ("pull", url, tmp_path / "p.warm", "--json"),
        ("stats", url, url),  # the parser's own line: an unexpected extra argument
        ("run", tmp_path / "w.py", url),  # a workload's argument
    ]
    said = []
    for args in runs:
        proc = warm(*args)
        assert "Traceback" not in proc.stderr, (args, proc.stderr)
        _no_secret(proc.stdout, proc.stderr)
        said.append(proc.stdout + proc.stderr)
    assert shown_as in said[0] and shown_as in said[1], said[:2]
    assert f"{shown_as} is a URL" in said[10], said[10]
    assert f"({shown_as})" in said[-2] and f"({shown_as})" in said[-1], said[-2:]
    # the store gone: the last good copy's warning, and the store's error, name it so too
    stores.body = b"no bundle"
    proc = warm("stats", url)
    assert proc.returncode == 0 and "using the last good copy" in proc.stderr, proc.stderr
    assert shown_as in proc.stderr, proc.stderr
    _no_secret(proc.stdout, proc.stderr)
    _home_holds_no_secret(Path(warm.env["WARM_HOME"]))


PRODUCE = (
    "import logging, sys, warnings; logging.basicConfig(stream=sys.stderr)\n"
    "warnings.simplefilter('always')\n"
    "sys.path.insert(0, {examples!r})\n"
    "import warmcli, matmul_host\n"
    "matmul_host.workload(warmcli.runtime('host'))\n"
    "r = warmcli.report(); print(r.bundle); print(r)\n"
)


def test_a_production_process_never_shows_them(stores: Stores, warm: Warm) -> None:
    url = _url(stores, query=f"?token={SIGNATURE}")
    env = dict(warm.env, WARM_BUNDLE=url, WARM_EXPLAIN="1")
    code = PRODUCE.format(examples=str(ROOT / "examples"))
    run = [sys.executable, "-c", code]
    first = subprocess.run(run, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert first.returncode == 0, first.stderr
    assert f"{USER}:***@" in first.stdout and "?***" in first.stdout, first.stdout
    stores.body = b"no bundle"  # the last good copy served, with one warning
    again = subprocess.run(run, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert again.returncode == 0, again.stderr
    assert "using the last good copy" in again.stderr, again.stderr
    for proc in (first, again):
        _no_secret(proc.stdout, proc.stderr)
    _home_holds_no_secret(Path(warm.env["WARM_HOME"]))


def test_a_presigned_url_signed_anew_is_the_same_kept_copy(
    stores: Stores, warm: Warm, tmp_path: Path
) -> None:
    for n, signature in enumerate(("one", "two", "three")):
        url = _url(stores, query=f"?X-Amz-Signature={signature}&X-Amz-Expires=60")
        proc = warm("pull", url, tmp_path / f"{n}.warm")
        assert proc.returncode == 0, proc.stderr
    assert stores.downloads == 1  # then asked whether it changed: a 304
    assert len(os.listdir(Path(warm.env["WARM_HOME"]) / "remote")) == 1


@pytest.mark.parametrize("port", ["65536", "abc", "0", "-1", "99999999999"])
def test_a_port_out_of_range_or_no_number_is_a_bad_url(
    warm: Warm, tmp_path: Path, port: str
) -> None:
    for args in (
        ("pull", f"https://u:{SECRET}@127.0.0.1:{port}/b.warm", tmp_path / "x.warm"),
        ("stats", f"https://127.0.0.1:{port}/b.warm"),
        ("push", tmp_path / "x.warm", f"https://127.0.0.1:{port}/b.warm"),
    ):
        if args[0] == "push":
            with Bundle.create(tmp_path / "x.warm"):
                pass
        proc = warm(*args)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert f"its port '{port}' is no number from 1 to 65535" in proc.stderr, proc.stderr
        _no_secret(proc.stderr)
    assert not (Path(warm.env["WARM_HOME"]) / "remote").exists()


def test_shown_and_kept_as_fake_urls() -> None:
    """Pure logic: how a URL is shown, and what its kept copy is known by."""
    assert shown("https://u:p@h:8/a/b.warm?x=1#f") == "https://u:***@h:8/a/b.warm?***#f"
    assert shown("https://token@h/b.warm") == "https://***@h/b.warm"
    assert shown("https://h/b.warm") == "https://h/b.warm"
    assert shown("s3://bucket/k.warm?versionId=1") == "s3://bucket/k.warm?***"
    assert shown("/tmp/a@b?c") == "/tmp/a@b?c"  # a path is as it is
    assert kept_as("https://u:p@h/b.warm?X-Amz-Signature=1") == "https://h/b.warm"
    assert kept_as("https://h/b.warm") == "https://h/b.warm"  # as earlier warms kept it
    # only a new signature's fields are the same object: another field names another one
    assert kept_as("https://h/get?name=a.warm&X-Amz-Date=1&sig=2") == "https://h/get?name=a.warm"
    assert kept_as("https://h/get?name=b.warm&Signature=3") == "https://h/get?name=b.warm"
    assert kept_as("https://h/b.warm?versionId=7&token=x&X-Goog-Signature=y#f") == (
        "https://h/b.warm?versionId=7#f"
    )
    assert kept_as(
        "https://h/b.warm?Key-Pair-Id=k&Policy=p&Expires=9&Signature=s&x%2Damz%2Dcredential=c"
    ) == ("https://h/b.warm")
    with pytest.raises(RemoteError, match="names no credentials"):
        url_text("s3://AKIA:secret@bucket/k.warm")
    with pytest.raises(RemoteError, match="names no host"):
        url_text("https://u:p@/b.warm")
    assert url_text("https://[::1]:8443/b.warm") == "https://[::1]:8443/b.warm"
    for spaced in (f"https://h/b.warm?token={SIGNATURE} x", f"https://u:{SECRET}\t@h/b.warm"):
        with pytest.raises(RemoteError, match="no space or control character") as refused:
            url_text(spaced)  # http.client would say why with the query in it
        _no_secret(str(refused.value))
    assert shown("https://u:p\tw@h/b?q\t1") == "https://u:***@h/b?***"  # (urlsplit drops \t)
    why = redirect_refused("https://h/a.warm", "https://u:p@elsewhere/b.warm")
    assert why is not None and "credentials" in why
