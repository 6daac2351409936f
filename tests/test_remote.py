"""Bundles by URL against real servers on 127.0.0.1: a stdlib HTTP server with ETags,
and moto's S3 server (`ThreadedMotoServer`: a real HTTP implementation of the S3
API, installable from the package registries; SeaweedFS and MinIO are not). The
production side and the CLI run in processes of their own, as users run them: each command
a fork of a process that imported the CLI once (`tests/forked_cli.py`), each production
process one of a process that imported numpy and warmcli once (`tests/forked_python.py`),
but the pushes started at once.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, ROOT, SERVE_MATMUL, Warm
from forked_python import ForkedPythons

from warmcli.bundle.remote import RemoteError, cache_dir, fetch


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


PRODUCE = SERVE_MATMUL.format(examples=str(EXAMPLES)) + (
    "import json; print(json.dumps({'kernels': len(r.kernels), 'tunes': len(r.tunes)}))"
)


class Store:
    """What the HTTP server serves (path -> bytes) and how many full downloads it sent;
    the headers of the PUTs it took, and a change it makes after a HEAD (a push racing)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.downloads = 0
        self.puts: list[Any] = []  # the headers (case-insensitive, as HTTP)
        self.after_head: bytes | None = None
        self.lock = threading.Lock()


def _etag(body: bytes) -> str:
    return '"' + hashlib.sha256(body).hexdigest() + '"'


def _handler(store: Store) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = store.files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            etag = _etag(body)
            if self.headers.get("If-None-Match") == etag:
                self.send_response(304)
                self.end_headers()
                return
            store.downloads += 1
            self.send_response(200)
            self.send_header("ETag", etag)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_HEAD(self) -> None:
            with store.lock:
                body = store.files.get(self.path)
                if body is not None and store.after_head is not None:
                    store.files[self.path], store.after_head = store.after_head, None
            self.send_response(404 if body is None else 200)
            if body is not None:
                self.send_header("ETag", _etag(body))
            self.end_headers()

        def do_PUT(self) -> None:
            """An object store's PUT: the body read whole, then published at once,
            if `If-Match` / `If-None-Match: *` hold (else 412)."""
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with store.lock:
                held = store.files.get(self.path)
                match, none = self.headers.get("If-Match"), self.headers.get("If-None-Match")
                if (match and (held is None or _etag(held) != match)) or (none and held):
                    self.send_error(412)
                    return
                store.files[self.path] = body
                store.puts.append(self.headers)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def http_store() -> Iterator[tuple[Store, str, ThreadingHTTPServer]]:
    store = Store()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(store))
    thread = threading.Thread(target=server.serve_forever, daemon=True, args=(0.05,))
    thread.start()
    yield store, f"http://127.0.0.1:{server.server_address[1]}", server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def built(built_once: tuple[bytes, bytes]) -> tuple[bytes, bytes]:
    """The host example's bundle (warmed once), and a second, different bundle (conftest's
    `built_once`: made once per test process, for the modules that import this fixture)."""
    return built_once


_python = ForkedPythons(ROOT)  # `_production`'s servers, one an environment apart from WARM_*


@pytest.fixture(scope="module", autouse=True)
def _pythons() -> Iterator[None]:
    """`_production`'s forking servers, ended with the module."""
    yield
    _python.close()


def _production(warm: Warm, url: str) -> tuple[dict[str, int], str]:
    """A production process served by `url` (`PRODUCE`): a fork of one that imported numpy
    and warmcli once; its counts of kernels and tunes compiled, and its stderr."""
    env = dict(warm.env, WARM_BUNDLE=url)
    proc = _python(env).run(PRODUCE, env=env, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """warm's home for the in-process fetches of one test."""
    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_http_download_cache_hit_change_and_store_down(
    http_store: tuple[Store, str, ThreadingHTTPServer], built: tuple[bytes, bytes], home: Path
) -> None:
    store, base, server = http_store
    url = base + "/b.warm"
    store.files["/b.warm"] = built[1]
    first = fetch(url)
    assert first.downloaded and first.path.read_bytes() == built[1] and store.downloads == 1
    again = fetch(url)  # unchanged: a conditional GET, no download
    assert not again.downloaded and again.warning is None and store.downloads == 1
    store.files["/b.warm"] = built[0]
    changed = fetch(url)
    assert changed.downloaded and changed.path.read_bytes() == built[0] and store.downloads == 2
    server.shutdown()
    server.server_close()
    down = fetch(url)
    assert not down.downloaded and down.path.read_bytes() == built[0]
    assert down.warning and "unreachable" in down.warning and "last good copy" in down.warning
    with pytest.raises(RemoteError, match="unreachable"):
        fetch(base + "/never-fetched.warm")


def test_a_corrupt_download_is_refused(
    http_store: tuple[Store, str, ThreadingHTTPServer], built: tuple[bytes, bytes], home: Path
) -> None:
    store, base, _ = http_store
    store.files["/bad.warm"] = b"SQLite format 3\x00" + b"\x07" * 4000
    with pytest.raises(RemoteError, match="download refused"):
        fetch(base + "/bad.warm")
    assert not (cache_dir(base + "/bad.warm") / "bundle.warm").exists()
    store.files["/b.warm"] = built[0]
    fetch(base + "/b.warm")
    store.files["/b.warm"] = built[0][: len(built[0]) // 2] + b"\x00" * (len(built[0]) // 2 + 1)
    kept = fetch(base + "/b.warm")  # the last good copy stays, and the refusal is said
    assert kept.path.read_bytes() == built[0] and "refused" in (kept.warning or "")
    assert not [p for p in kept.path.parent.iterdir() if p.suffix == ".tmp"]


def test_production_over_http_starts_hot_even_with_the_store_down(
    http_store: tuple[Store, str, ThreadingHTTPServer], built: tuple[bytes, bytes], warm: Warm
) -> None:
    store, base, server = http_store
    store.files["/b.warm"] = built[0]
    counts, stderr = _production(warm, base + "/b.warm")
    assert counts == {"kernels": 0, "tunes": 0} and not stderr
    counts, stderr = _production(warm, base + "/b.warm")
    assert store.downloads == 1  # once per machine
    server.shutdown()
    server.server_close()
    counts, stderr = _production(warm, base + "/b.warm")
    assert counts == {"kernels": 0, "tunes": 0}
    assert stderr.count("RemoteBundleWarning") == 1 and "last good copy" in stderr


# -- S3 ----------------------------------------------------------------------------------------


def test_http_push_is_one_conditional_put_and_a_race_is_refused_not_lost(
    http_store: tuple[Store, str, ThreadingHTTPServer],
    built: tuple[bytes, bytes],
    warm: Warm,
    tmp_path: Path,
) -> None:
    store, base, _ = http_store
    full, other = tmp_path / "full.warm", tmp_path / "other.warm"
    full.write_bytes(built[0])
    other.write_bytes(built[1])
    doc = warm.json("push", full, f"{base}/b.warm")  # nothing there yet: If-None-Match: *
    assert store.files["/b.warm"] == built[0]
    assert doc["sha256"] == store.puts[-1]["X-Warm-Sha256"] == hashlib.sha256(built[0]).hexdigest()
    assert (
        store.puts[-1]["Content-MD5"] == base64.b64encode(hashlib.md5(built[0]).digest()).decode()
    )
    assert store.puts[-1]["If-None-Match"] == "*"
    assert warm("push", other, f"{base}/b.warm").returncode == 0  # replaces what it saw
    assert store.puts[-1]["If-Match"] == _etag(built[0]) and store.files["/b.warm"] == built[1]
    pulled = tmp_path / "pulled.warm"
    assert warm("pull", f"{base}/b.warm", pulled).returncode == 0
    assert pulled.read_bytes() == built[1]
    store.after_head = built[0]  # another push lands between this push's HEAD and its PUT
    proc = warm("push", other, f"{base}/b.warm")
    assert proc.returncode == 2 and "another push won" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert store.files["/b.warm"] == built[0]  # the other push's, whole
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "warmcli", "push", p, f"{base}/race.warm"],
            env=warm.env,
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in (full, other) * 2
    ]
    errors = [p.communicate(timeout=120)[1] for p in procs]
    assert all(
        p.returncode == 0 or "another push won" in e for p, e in zip(procs, errors, strict=True)
    )
    assert any(p.returncode == 0 for p in procs) and store.files["/race.warm"] in built


def test_push_names_what_it_supports(
    warm: Warm, built: tuple[bytes, bytes], tmp_path: Path
) -> None:
    full = tmp_path / "full.warm"
    full.write_bytes(built[0])
    proc = warm("push", full, "ftp://host/b.warm")
    assert proc.returncode == 2 and "s3://bucket/key or https:// URLs" in proc.stderr
    proc = warm("push", full, "http://127.0.0.1:9/b.warm")  # nothing listens: discard port
    assert proc.returncode == 2 and "store unreachable" in proc.stderr
    url = "http://bundles.example.com/b.warm"  # plain http off this machine: refused
    for command in (("push", full), ("pull",), ("stats",), ("verify",)):
        proc = warm(*command, url)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "plain http:// is refused" in proc.stderr and "Traceback" not in proc.stderr


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch, warm: Warm) -> Iterator[Any]:
    pytest.importorskip("boto3")
    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    aws = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for k, v in aws.items():
        monkeypatch.setenv(k, v)
    warm.env.update(aws)
    import boto3

    boto3.client("s3").create_bucket(Bucket="fleet")
    yield server
    server.stop()


def test_s3_push_pull_stats_merge_and_production(
    s3: Any, built: tuple[bytes, bytes], warm: Warm, tmp_path: Path
) -> None:
    full, other = tmp_path / "full.warm", tmp_path / "other.warm"
    full.write_bytes(built[0])
    other.write_bytes(built[1])
    for bundle, key in ((full, "full.warm"), (other, "other.warm")):
        proc = warm("push", bundle, f"s3://fleet/{key}")
        assert proc.returncode == 0 and "pushed" in proc.stdout, proc.stderr
    stats = warm.json("stats", "s3://fleet/full.warm")
    assert len(stats["kernels"]) == 6 and len(stats["tunes"]) == 3
    merged = tmp_path / "merged.warm"
    proc = warm("merge", "s3://fleet/full.warm", "s3://fleet/other.warm", "-o", merged)
    assert proc.returncode == 0, proc.stderr
    pulled = tmp_path / "pulled.warm"
    assert warm("pull", "s3://fleet/other.warm", pulled).returncode == 0
    assert pulled.read_bytes() == built[1]
    counts, stderr = _production(warm, "s3://fleet/full.warm")
    assert counts == {"kernels": 0, "tunes": 0}, stderr
    s3.stop()
    counts, stderr = _production(warm, "s3://fleet/full.warm")
    assert counts == {"kernels": 0, "tunes": 0}
    assert stderr.count("RemoteBundleWarning") == 1 and "last good copy" in stderr
    proc = warm("stats", "s3://fleet/never.warm")
    assert proc.returncode == 2 and proc.stderr.startswith("warm: error: s3://fleet/never.warm")
    s3.start()


def test_s3_push_refuses_what_is_no_bundle_and_concurrent_pushes_never_tear(
    s3: Any, built: tuple[bytes, bytes], warm: Warm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    junk = tmp_path / "junk.warm"
    junk.write_bytes(b"not a bundle")
    proc = warm("push", junk, "s3://fleet/x.warm")
    assert proc.returncode == 2 and "not pushed" in proc.stderr
    paths = []
    for i, data in enumerate(built):
        paths.append(tmp_path / f"b{i}.warm")
        paths[-1].write_bytes(data)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "warmcli", "push", p, "s3://fleet/race.warm"],
            env=warm.env,
            cwd=ROOT,
        )
        for p in paths * 2
    ]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    assert fetch("s3://fleet/race.warm").path.read_bytes() in built
