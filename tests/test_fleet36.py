"""A fleet sharing one bundle: CI pushes it to an object store, production pulls it.

Real parts only: the CLI in subprocesses, the system cc, SQLite files, an HTTP store on
127.0.0.1 that answers as S3 does (an ETag that is the body's MD5, its length on a HEAD,
conditional PUTs), and moto's S3 server.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm


@pytest.fixture
def warm(warm: Warm, forked: Any) -> Any:
    """conftest's `warm`, each command a fork of a process that imported the CLI once
    (`tests/forked_cli.py`): no test here is of how a process starts."""
    return forked(warm)


class S3Like:
    """What the store holds (path -> bytes), the sha256 metadata it states of some (as
    S3 gives an object's `x-amz-meta-sha256`) and the PUTs it took."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.meta: dict[str, str] = {}
        self.puts: list[str] = []
        self.lock = threading.Lock()


def _md5_etag(body: bytes) -> str:
    return '"' + hashlib.md5(body).hexdigest() + '"'


def _handler(store: S3Like) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _head(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("ETag", _md5_etag(body))
            self.send_header("Content-Length", str(len(body)))
            if self.path in store.meta:
                self.send_header("x-amz-meta-sha256", store.meta[self.path])
            self.end_headers()

        def do_GET(self) -> None:
            body = store.files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self._head(body)
            self.wfile.write(body)

        def do_HEAD(self) -> None:
            body = store.files.get(self.path)
            if body is None:
                self.send_response(404)
                self.end_headers()
                return
            self._head(body)

        def do_PUT(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            with store.lock:
                held = store.files.get(self.path)
                match, none = self.headers.get("If-Match"), self.headers.get("If-None-Match")
                if (match and (held is None or _md5_etag(held) != match)) or (none and held):
                    self.send_error(412)
                    return
                store.files[self.path] = body
                store.puts.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def s3_like() -> Iterator[tuple[S3Like, str]]:
    store = S3Like()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(store))
    thread = threading.Thread(target=server.serve_forever, daemon=True, args=(0.05,))
    thread.start()
    yield store, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def built(
    tmp_path_factory: pytest.TempPathFactory, built_once: tuple[bytes, bytes]
) -> tuple[Path, Path]:
    """The host example warmed whole, and its shard 1 of 4: two different bundles (conftest's
    `built_once`, made once per test process: the same two `warm run`s this module made)."""
    folder = tmp_path_factory.mktemp("built")
    full, other = folder / "full.warm", folder / "other.warm"
    full.write_bytes(built_once[0])
    other.write_bytes(built_once[1])
    return full, other


def test_push_of_what_the_store_holds_already_sends_nothing(
    s3_like: tuple[S3Like, str], built: tuple[Path, Path], warm: Warm
) -> None:
    store, base = s3_like
    full, other = built
    url = f"{base}/fleet.warm"
    first = warm("push", full, url)
    assert first.returncode == 0 and first.stdout.startswith("pushed "), first.stderr
    assert store.puts == ["/fleet.warm"]
    again = warm("push", full, url)  # the same bytes: the store's MD5 ETag and length say so
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"unchanged: {url} already holds {full}"), again.stdout
    assert store.puts == ["/fleet.warm"]  # nothing sent
    doc = warm.json("push", full, url)
    assert doc["sent"] is False and doc["sha256"] == hashlib.sha256(full.read_bytes()).hexdigest()
    changed = warm.json("push", other, url)  # another bundle is sent, over what it saw
    assert changed["sent"] is True and store.files["/fleet.warm"] == other.read_bytes()
    assert len(store.puts) == 2


def test_pull_of_a_url_never_pushed_says_so(
    s3_like: tuple[S3Like, str], warm: Warm, tmp_path: Path
) -> None:
    _, base = s3_like
    target = tmp_path / "got.warm"
    proc = warm("pull", f"{base}/never.warm", target)
    assert proc.returncode == 2 and not target.exists()
    assert "Traceback" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    assert "no bundle there (HTTP 404" in proc.stderr and "none was pushed to it yet" in proc.stderr


@pytest.fixture
def s3(warm: Warm) -> Iterator[None]:
    pytest.importorskip("boto3")
    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    warm.env.update(
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_DEFAULT_REGION="us-east-1",
    )
    proc = warm("pull", "s3://fleet/x.warm")  # warm's own client; the bucket made by moto's
    assert proc.returncode == 2
    import boto3

    boto3.client(
        "s3",
        endpoint_url=f"http://{host}:{port}",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
    ).create_bucket(Bucket="fleet")
    yield
    server.stop()


def test_s3_push_unchanged_sends_nothing_and_a_key_never_pushed_is_said(
    s3: None, built: tuple[Path, Path], warm: Warm, tmp_path: Path
) -> None:
    full, other = built
    proc = warm("pull", "s3://fleet/never.warm", tmp_path / "got.warm")
    assert proc.returncode == 2 and "none was pushed to it yet" in proc.stderr, proc.stderr
    assert warm.json("push", full, "s3://fleet/b.warm")["sent"] is True
    doc = warm.json("push", full, "s3://fleet/b.warm")  # its sha256 in the metadata: the same
    assert doc["sent"] is False
    assert warm.json("push", other, "s3://fleet/b.warm")["sent"] is True
    assert warm("pull", "s3://fleet/b.warm", tmp_path / "b.warm").returncode == 0
    assert (tmp_path / "b.warm").read_bytes() == other.read_bytes()


# Two CI jobs warming one bundle at once: each measures tune T in its tuning pass (the
# second call of the workload) and waits there for the other, so both have measured it
# before either stores it. c0 is far the fastest: both pick it.
RACING = """
import os, re, time
from pathlib import Path
import numpy as np
from warmcli import Kernel, Tunable

SRC = ("void scale(const float *x, float *y, int n) "
       "{ for (int r = 0; r < REPEAT; r++) for (int i = 0; i < n; i++) y[i] = x[i] * 2.0f; }")
def launch_t(rt, k, x, y, n, *, stream=None):
    rt.launch(k, x, y, n, stream=stream)
T = Tunable(name="t", launch=launch_t, candidates={
    f"c{i}": Kernel(SRC, "scale", "PPi", defines={"REPEAT": 1 + 3000 * i}, name="scale")
    for i in range(3)})
SYNC = Path(os.environ["SYNC"])
def workload(rt):
    me, other = os.environ["JOB"], os.environ["OTHER"]
    with open(SYNC / f"{me}.calls", "a") as f:
        f.write("x")
    x = rt.upload(np.arange(256, dtype=np.float32))
    y = rt.buffer(256, "float32")
    rt.tune(T, x, y, 256)
    if len((SYNC / f"{me}.calls").read_text()) == 2:
        (SYNC / f"{me}.tuned").touch()
        end = time.time() + 60
        while not (SYNC / f"{other}.tuned").exists() and time.time() < end:
            time.sleep(0.02)
"""


def test_two_runs_that_measured_one_tune_at_once_count_it_once(
    warm: Warm, workload_file: Any, tmp_path: Path
) -> None:
    import re
    import subprocess
    import sys

    from conftest import ROOT

    script = workload_file(RACING)
    bundle = tmp_path / "ci.warm"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "warmcli", "run", script, "-b", bundle, "-q"],
            env=dict(warm.env, SYNC=str(tmp_path), JOB=me, OTHER=other),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for me, other in (("a", "b"), ("b", "a"))
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert (tmp_path / "a.tuned").exists() and (tmp_path / "b.tuned").exists()
    stored = [
        re.search(r"stored (\d+) new kernel\(s\) and (\d+) new tune\(s\)", out).groups()
        for out, _ in outs
    ]
    assert sum(int(k) for k, _ in stored) == 3, outs  # each kernel stored by one of them
    assert sum(int(t) for _, t in stored) == 1, outs  # and the tune too, not by both
    stats = warm.json("stats", bundle)
    assert len(stats["tunes"]) == 1 and len(stats["kernels"]) == 3


def test_an_https_download_is_checked_against_the_sha256_the_store_states(
    s3_like: tuple[S3Like, str], built: tuple[Path, Path], warm: Warm, tmp_path: Path
) -> None:
    store, base = s3_like
    full, other = built
    store.files["/b.warm"] = full.read_bytes()  # a sound bundle, but not the one pushed
    store.meta["/b.warm"] = hashlib.sha256(other.read_bytes()).hexdigest()
    target = tmp_path / "b.warm"
    proc = warm("pull", f"{base}/b.warm", target)
    assert proc.returncode == 2 and not target.exists(), proc.stdout
    assert "download refused" in proc.stderr and "differs from the stated" in proc.stderr
    store.meta["/b.warm"] = hashlib.sha256(full.read_bytes()).hexdigest().upper()
    assert warm("pull", f"{base}/b.warm", target).returncode == 0
    assert target.read_bytes() == full.read_bytes()
    # a push of those bytes is sent nothing: the stated sha256 says the store holds them
    assert warm.json("push", full, f"{base}/b.warm")["sent"] is False
    assert store.puts == []
    # metadata that says so over other bytes (their MD5 ETag differs): sent again, mended
    store.files["/b.warm"] = other.read_bytes()
    assert warm.json("push", full, f"{base}/b.warm")["sent"] is True
    assert store.files["/b.warm"] == full.read_bytes()


def test_a_pull_over_a_local_bundle_says_what_it_held_that_the_pull_lacks(
    s3_like: tuple[S3Like, str], built: tuple[Path, Path], warm: Warm, tmp_path: Path
) -> None:
    store, base = s3_like
    full, other = built
    store.files["/b.warm"] = other.read_bytes()  # CI's bundle: less than the local copy holds
    local = tmp_path / "local.warm"  # the copy production wrote its misses back into
    local.write_bytes(full.read_bytes())
    held, pulled = warm.json("stats", full), warm.json("stats", other)
    lacks = (
        len({k["key"] for k in held["kernels"]} - {k["key"] for k in pulled["kernels"]}),
        len({t["key"] for t in held["tunes"]} - {t["key"] for t in pulled["tunes"]}),
    )
    assert lacks[0] > 0 and lacks[1] > 0
    proc = warm("pull", f"{base}/b.warm", local)
    assert proc.returncode == 0 and local.read_bytes() == other.read_bytes(), proc.stderr
    assert (
        f"replaced: {local} held {lacks[0]} kernel(s) and {lacks[1]} tune(s) that "
        f"{base}/b.warm lacks; they are gone"
    ) in proc.stdout, proc.stdout
    doc = warm.json("pull", f"{base}/b.warm", local)  # the same again: nothing dropped
    assert doc["dropped"] == {"kernels": 0, "tunes": 0}
    again = warm("pull", f"{base}/b.warm", local)
    assert again.returncode == 0 and "replaced" not in again.stdout


def test_a_pull_over_a_local_file_whose_schema_is_not_warms_runs_none_of_it(
    s3_like: tuple[S3Like, str], built: tuple[Path, Path], warm: Warm, tmp_path: Path
) -> None:
    """Counting what the replaced bundle held read its tables as they were: a local file
    whose `kernels` is a view of an endless recursive query (its header warm's) hung `warm
    pull` for ever. Its schema is checked first, as every open checks it: nothing counted."""
    import sqlite3

    store, base = s3_like
    full, other = built
    store.files["/b.warm"] = other.read_bytes()
    local = tmp_path / "local.warm"
    local.write_bytes(full.read_bytes())
    conn = sqlite3.connect(local)
    conn.executescript(
        "DROP TABLE kernels; CREATE VIEW kernels AS WITH RECURSIVE c(x) AS (SELECT 1 UNION "
        "ALL SELECT x + 1 FROM c) SELECT CAST(x AS TEXT) AS key FROM c;"
    )
    conn.close()
    proc = warm("pull", f"{base}/b.warm", local, timeout=60)
    assert proc.returncode == 0 and local.read_bytes() == other.read_bytes(), proc.stderr
    assert "replaced" not in proc.stdout, proc.stdout
