"""Pull, run, push: a fleet's copy pushed back fast-forwards when nobody pushed since (stop
62), against the real CLI and real stores on 127.0.0.1 (`test_remote`'s HTTP store, moto).

`warm merge URL a.warm -o m.warm && warm push m.warm URL`, then on another machine `warm pull
URL x.warm`, `warm run w.py -b x.warm` (more kernels), `warm push x.warm URL`: refused as
"changed since merged" though nobody pushed since (the pulled copy records the version m.warm
was merged from; its manifest is signed, a pull cannot rewrite it). Now the push compares what
the store holds now with what it pushes (`warmcli.bundle.fast_forward`): all held, it goes
on, conditional on the version just read; another job's push in between is still refused
(naming what would be lost), as is one that lands between that read and the PUT.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's, commands forked)
from local_http import served_locally
from test_fleet61 import _held, jobs  # noqa: F401  (fixture)
from test_remote import Store, _etag, _handler, http_store, s3  # noqa: F401  (fixtures)

from warmcli.bundle.merged_from import KEY

Served = tuple[Store, str, ThreadingHTTPServer]


def _store(
    kind: str, request: pytest.FixtureRequest, warm: Warm, tmp_path: Path
) -> tuple[str, Any]:
    """A URL at the store `kind`, and a function putting bytes there (as a push would)."""
    if kind == "s3":
        request.getfixturevalue("s3")
        url = f"s3://fleet/{tmp_path.name}.warm"  # (moto's objects outlive its server)

        def put(data: bytes) -> None:
            import boto3

            boto3.client("s3").put_object(Bucket="fleet", Key=f"{tmp_path.name}.warm", Body=data)

        return url, put
    store, base, _ = request.getfixturevalue("http_store")
    return f"{base}/fleet.warm", lambda data: store.files.__setitem__("/fleet.warm", data)


def _merged_push_then_pull(
    warm: Warm,
    tmp_path: Path,
    url: str,
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
) -> tuple[Warm, Path]:
    """Job A merges the store with its bundle and pushes; machine X pulls the result and
    runs the many-kernels example on it with 7 kernels (2 more than the store's): X's
    warm and its copy."""
    (tmp_path / "a.warm").write_bytes(jobs[1])
    job_a = warm.with_env(WARM_HOME=str(tmp_path / "home-a"))
    merged = tmp_path / "m.warm"
    assert job_a("merge", url, tmp_path / "a.warm", "-o", merged).returncode == 0
    proc = job_a("push", merged, url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    x = warm.with_env(WARM_HOME=str(tmp_path / "home-x"), WARM_EXAMPLE_KERNELS="7")
    copy = tmp_path / "x.warm"
    assert x("pull", url, copy).returncode == 0
    before = _held(x, copy)[0]
    proc = x("run", EXAMPLES / "many_kernels_host.py", "-b", copy, "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(_held(x, copy)[0]) > len(before)  # the run added kernels
    return x, copy


@pytest.mark.parametrize("kind", ["https", "s3"])
def test_pull_run_push_is_accepted_when_nobody_pushed_since(
    kind: str,
    request: pytest.FixtureRequest,
    warm: Warm,
    tmp_path: Path,
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
) -> None:
    url, put = _store(kind, request, warm, tmp_path)
    put(jobs[0])
    x, copy = _merged_push_then_pull(warm, tmp_path, url, jobs)
    store = request.getfixturevalue("http_store")[0] if kind == "https" else None
    downloads = store.downloads if store else 0
    proc = x("push", copy, url)
    # Before: exit 2, "changed since x.warm was merged from it", nobody having pushed since.
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pushed" in proc.stdout and proc.stderr == "", proc.stdout + proc.stderr
    if store:  # what the store held read once, to compare; the PUT on the ETag read
        assert store.downloads == downloads + 1
        assert store.puts[-1]["If-Match"] == _etag((tmp_path / "m.warm").read_bytes())
    pulled = tmp_path / "pulled.warm"
    assert warm("pull", url, pulled).returncode == 0
    assert pulled.read_bytes() == copy.read_bytes()  # X's copy, whole


@pytest.mark.parametrize("kind", ["https", "s3"])
def test_another_jobs_push_in_between_is_refused_naming_what_it_would_lose(
    kind: str,
    request: pytest.FixtureRequest,
    warm: Warm,
    tmp_path: Path,
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
) -> None:
    url, put = _store(kind, request, warm, tmp_path)
    put(jobs[0])
    x, copy = _merged_push_then_pull(warm, tmp_path, url, jobs)
    # Job B (10 kernels: 3 that X's run of 7 lacks) merges and pushes after X pulled.
    (tmp_path / "b.warm").write_bytes(jobs[2])
    job_b = warm.with_env(WARM_HOME=str(tmp_path / "home-b"))
    b_next = tmp_path / "b-next.warm"
    assert job_b("merge", url, tmp_path / "b.warm", "-o", b_next).returncode == 0
    assert job_b("push", b_next, url).returncode == 0
    proc = x("push", copy, url)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert f"{url} changed since {copy} was merged from it" in proc.stderr
    lost = re.search(r" and holds (\d+) kernels? (?:and \d+ tunes? )?that ", proc.stderr)
    assert lost and int(lost[1]) >= 3, proc.stderr
    assert "nothing lost" in proc.stderr and "--force" in proc.stderr
    pulled = tmp_path / "pulled.warm"
    assert warm("pull", url, pulled).returncode == 0
    assert pulled.read_bytes() == b_next.read_bytes()  # B's push, whole


class _Racing(Store):
    """A store where another push lands right after the Nth request of a method."""

    def __init__(self) -> None:
        super().__init__()
        self.race: tuple[str, int, bytes] | None = None  # (method, nth, what lands)
        self.seen: dict[str, int] = {}


@pytest.fixture
def racing_store() -> Iterator[tuple[_Racing, str]]:
    store = _Racing()
    base = _handler(store)

    class Handler(base):  # type: ignore[misc,valid-type]
        def _after(self) -> None:
            with store.lock:
                store.seen[self.command] = store.seen.get(self.command, 0) + 1
                if store.race and store.race[:2] == (self.command, store.seen[self.command]):
                    store.files[self.path] = store.race[2]

        def do_GET(self) -> None:
            super().do_GET()
            self._after()

        def do_HEAD(self) -> None:
            super().do_HEAD()
            self._after()

    with served_locally(Handler) as base:
        yield store, base


def _stale_record(
    warm: Warm,
    tmp_path: Path,
    url: str,
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
) -> Path:
    """A bundle merged from `url` (holding jobs[0] then) and jobs[1], whose record is then
    of a version the store never held: its push compares what the store holds."""
    (tmp_path / "a.warm").write_bytes(jobs[1])
    out = tmp_path / "x.warm"
    assert warm("merge", url, tmp_path / "a.warm", "-o", out).returncode == 0
    with sqlite3.connect(out) as conn:
        record = [{"url": url, "etag": '"old"', "sha256": "0" * 64}]
        conn.execute("UPDATE manifest SET value = ? WHERE key = ?", (json.dumps(record), KEY))
    return out


@pytest.mark.parametrize("after", [("GET", 1), ("HEAD", 2)], ids=["read", "head"])
def test_a_push_landing_between_the_read_and_the_put_is_refused(
    warm: Warm,
    tmp_path: Path,
    racing_store: tuple[_Racing, str],
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
    after: tuple[str, int],
) -> None:
    """The store's object (all of which the push holds) read, then another push lands:
    after the GET (the HEAD before the PUT sees it), or after that HEAD (the PUT's
    `If-Match` on the ETag read: the store's 412)."""
    store, base = racing_store
    url = f"{base}/fleet.warm"
    store.files["/fleet.warm"] = jobs[0]
    out = _stale_record(warm, tmp_path, url, jobs)
    store.seen.clear()
    store.race = (*after, jobs[2])  # another job's push
    proc = warm("push", out, url)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert f"{url} changed while the push of {out} compared what it holds" in proc.stderr
    assert store.files["/fleet.warm"] == jobs[2] and store.puts == []  # nothing lost
    # No race: the same push goes ahead (what the store holds, jobs[0], it holds).
    store.files["/fleet.warm"], store.race = jobs[0], None
    proc = warm("push", out, url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert store.files["/fleet.warm"] == out.read_bytes()


@pytest.mark.parametrize("hostile", ["corrupt", "huge"])
def test_a_hostile_store_object_is_one_line_and_nothing_lost(
    warm: Warm,
    tmp_path: Path,
    http_store: Served,  # noqa: F811
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
    hostile: str,
) -> None:
    store, base, _ = http_store
    url = f"{base}/fleet.warm"
    store.files["/fleet.warm"] = jobs[0]
    out = _stale_record(warm, tmp_path, url, jobs)
    env: dict[str, str] = {}
    if hostile == "corrupt":
        page = 16384  # (warm's bundles' SQLite page): the fourth one's cells gone
        held = jobs[0][: 3 * page] + b"\0" * page + jobs[0][4 * page :]
    else:  # a bundle larger than the bound WARM_REMOTE_MAX_SIZE sets
        held = jobs[2]
        env["WARM_REMOTE_MAX_SIZE"] = str(len(jobs[2]) - 1)
    store.files["/fleet.warm"] = held
    proc = warm.with_env(**env)("push", out, url)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert f"{url} changed since {out} was merged from it" in proc.stderr
    said = "holds no bundle warm reads" if hostile == "corrupt" else "WARM_REMOTE_MAX_SIZE"
    assert said in proc.stderr, proc.stderr
    assert store.files["/fleet.warm"] == held and store.puts == []


@pytest.fixture
def etagless_store() -> Iterator[tuple[_Racing, str]]:
    """A store that gives no ETag (to a GET or a HEAD), but states the sha256 of what it
    holds in its HEAD's `X-Warm-Sha256`; another push may land after a request (`race`)."""
    import hashlib

    store = _Racing()
    base = _handler(store)

    class Handler(base):  # type: ignore[misc,valid-type]
        def send_header(self, keyword: str, value: str) -> None:
            if keyword != "ETag":
                super().send_header(keyword, value)

        def end_headers(self) -> None:
            body = store.files.get(self.path)
            if self.command == "HEAD" and body is not None:
                super().send_header("X-Warm-Sha256", hashlib.sha256(body).hexdigest())
            super().end_headers()

        def do_GET(self) -> None:
            super().do_GET()
            with store.lock:
                if store.race and store.race[0] == "GET":
                    store.files[self.path], store.race = store.race[2], None

    with served_locally(Handler) as base:
        yield store, base


def test_a_store_without_etags_is_compared_by_the_sha256_read(
    warm: Warm,
    tmp_path: Path,
    etagless_store: tuple[_Racing, str],
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
) -> None:
    """No ETag to send `If-Match` with: the push goes on where the HEAD before its PUT states
    the sha256 of what was read and compared; another push landing after that read is
    refused (the HEAD states another sha256)."""
    store, base = etagless_store
    url = f"{base}/fleet.warm"
    store.files["/fleet.warm"] = jobs[0]
    out = _stale_record(warm, tmp_path, url, jobs)
    store.race = ("GET", 1, jobs[2])  # another job's push, right after the read
    proc = warm("push", out, url)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{url} changed while the push of {out} compared what it holds" in proc.stderr
    assert store.files["/fleet.warm"] == jobs[2] and store.puts == []
    store.files["/fleet.warm"] = jobs[0]  # no race: pushed, as nothing is lost
    proc = warm("push", out, url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert store.files["/fleet.warm"] == out.read_bytes()
    assert "If-Match" not in store.puts[-1]  # (none to send: the HEAD's sha256 compared)
