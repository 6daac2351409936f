"""Where a bundle's URL may redirect: against real servers on 127.0.0.1, an https:// one
(a certificate made here, trusted through `SSL_CERT_FILE`) and a plain http:// one. A
redirect never takes https:// down to plain http://, not even to this machine's; one
from https:// to https://, or from plain http:// here to here, is followed.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.bundle.remote import RemoteError, fetch
from warmcli.bundle.store import Bundle

x509 = pytest.importorskip("cryptography.x509")


def _certificate(folder: Path, names: tuple[str, ...] = ()) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and host `names` (and its key), written into
    `folder`."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), *map(x509.DNSName, names)]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = folder / "cert.pem", folder / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class Servers:
    """An https:// and a plain http:// server: each serves `body` at /b.warm, redirects
    /to-http and /to-https to the other's /b.warm, and counts the requests it took."""

    def __init__(self, body: bytes, cert: Path) -> None:
        self.body, self.cert = body, cert
        self.hits: dict[str, int] = {"https": 0, "http": 0}
        self.base: dict[str, str] = {}


def _handler(servers: Servers, scheme: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            servers.hits[scheme] += 1
            if self.path == "/b.warm":
                self.send_response(200)
                self.send_header("Content-Length", str(len(servers.body)))
                self.end_headers()
                self.wfile.write(servers.body)
                return
            to = {"/to-http": "http", "/to-https": "https", "/here": scheme}[self.path]
            self.send_response(302)
            self.send_header("Location", servers.base[to] + "/b.warm")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    return Handler


@pytest.fixture
def servers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Servers]:
    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    cert, key = _certificate(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # what urllib's default context trusts
    with Bundle.create(tmp_path / "b.warm"):
        pass
    found = Servers((tmp_path / "b.warm").read_bytes(), cert)
    running = []
    for scheme in ("https", "http"):
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(found, scheme))
        if scheme == "https":
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert, key)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        found.base[scheme] = f"{scheme}://127.0.0.1:{server.server_address[1]}"
        threading.Thread(target=server.serve_forever, daemon=True, args=(0.05,)).start()
        running.append(server)
    yield found
    for server in running:
        server.shutdown()
        server.server_close()


def test_https_redirected_to_this_machines_plain_http_is_refused_never_followed(
    servers: Servers, warm: Warm
) -> None:
    got = fetch(servers.base["https"] + "/here")  # https:// to https://: followed
    assert got.downloaded and got.path.read_bytes() == servers.body
    got = fetch(servers.base["http"] + "/here")  # plain http:// here to here: followed
    assert got.downloaded and servers.hits["http"] == 2
    hits = dict(servers.hits)
    url = servers.base["https"] + "/to-http"
    with pytest.raises(RemoteError) as refused:
        fetch(url)
    said = str(refused.value)
    assert said.startswith(f"{url}: redirect to {servers.base['http']}/b.warm refused"), said
    assert "never from https:// down to plain http://" in said and "\n" not in said, said
    assert servers.hits == dict(hits, https=hits["https"] + 1)  # plain http:// never asked
    warm.env["SSL_CERT_FILE"] = str(servers.cert)  # the CLI trusts the certificate too
    proc = warm("stats", url)  # one line, exit 2
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "redirect to" in proc.stderr and "down to plain http://" in proc.stderr, proc.stderr
    assert servers.hits["http"] == hits["http"]
