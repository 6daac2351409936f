"""A store that sends `Last-Modified` but no ETag (Python's own `http.server`, as many static
servers, CDNs and object gateways): warm asks it by that date (`If-Modified-Since`) and
serves the kept copy on a 304, where it downloaded the whole bundle at every fetch; a date
within seconds of its answer (a bundle replaced within that second keeps it) is not
trusted, and a store that sends an ETag is asked by it. A real `http.server` on 127.0.0.1
serves a folder, its log of answers counted; the library's `fetch` in this process (no
test here is of a fresh process: `tools/etagless_fleet.py` starts a fleet of them).
"""

from __future__ import annotations

import functools
import json
import os
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from warmcli.bundle.remote import cache_dir, fetch
from warmcli.bundle.store import Bundle


class Served:
    """A folder served by `http.server` on 127.0.0.1 (with `etag`, an ETag too), and its
    log: (status, the request's If-None-Match, its If-Modified-Since) per answer."""

    def __init__(self, folder: Path, etag: str | None = None) -> None:
        self.folder, self.etag, self.log = folder, etag, []
        handler = functools.partial(_Handler, self, directory=str(folder))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/b.warm"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def statuses(self) -> list[int]:
        return [status for status, _, _ in self.log]

    def put(self, body: bytes, age: float) -> None:
        """`body` as the bundle served, modified `age` seconds ago."""
        path = self.folder / "b.warm"
        path.write_bytes(body)
        os.utime(path, (time.time() - age, time.time() - age))


class _Handler(SimpleHTTPRequestHandler):
    def __init__(self, served: Served, *args: Any, **kwargs: Any) -> None:
        self.served = served
        super().__init__(*args, **kwargs)

    def send_head(self) -> Any:
        etag = self.served.etag
        if etag and self.headers.get("If-None-Match") == etag:
            self.send_response(304)
            self.end_headers()
            return None
        return super().send_head()

    def end_headers(self) -> None:
        if self.served.etag:
            self.send_header("ETag", self.served.etag)
        super().end_headers()

    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        asked = self.headers.get("If-None-Match"), self.headers.get("If-Modified-Since")
        self.served.log.append((int(code), *asked))

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    (tmp_path / "store").mkdir()
    served = Served(tmp_path / "store")
    yield served
    served.server.shutdown()
    served.server.server_close()


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes]:
    """Two bundles, empty but for their manifests (made a moment apart: not the same bytes)."""
    folder = tmp_path_factory.mktemp("bundles52f")
    made = []
    for name in ("a.warm", "b.warm"):
        with Bundle.open(folder / name, write=True):
            pass
        made.append((folder / name).read_bytes())
        time.sleep(0.01)
    assert made[0] != made[1]
    return made[0], made[1]


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WARM_REMOTE_DEADLINE", "20")


def test_a_store_without_an_etag_is_asked_by_its_last_modified(
    served: Served, bundles: tuple[bytes, bytes]
) -> None:
    served.put(bundles[0], age=60)
    got = [fetch(served.url) for _ in range(3)]
    assert [g.downloaded for g in got] == [True, False, False]
    assert all(g.warning is None and g.path.read_bytes() == bundles[0] for g in got)
    assert served.statuses() == [200, 304, 304]  # was [200, 200, 200]
    date = served.log[1][2]
    assert date and date.endswith("GMT") and served.log[1] == served.log[2] == (304, None, date)
    # What an older warm reads is as it was (an ETag: the sha256); the date added to it
    meta = json.loads((cache_dir(served.url) / "meta.json").read_text())
    assert {"etag", "sha256", "copy"} <= set(meta) and meta["etag"] == meta["sha256"]
    assert meta["last_modified"] == date and meta["length"] == str(len(bundles[0]))


def test_a_bundle_replaced_within_the_second_it_was_fetched_is_downloaded_again(
    served: Served, bundles: tuple[bytes, bytes]
) -> None:
    """Racily clean: fetched within the second its store's file was written, then replaced
    within that second (its Last-Modified the same): downloaded again, never taken as
    unchanged."""
    served.put(bundles[0], age=0)
    assert fetch(served.url).downloaded
    stamp = os.stat(served.folder / "b.warm").st_mtime_ns
    served.put(bundles[1], age=0)
    os.utime(served.folder / "b.warm", ns=(stamp, stamp))  # the same second, as it may be
    got = fetch(served.url)
    assert got.downloaded and got.path.read_bytes() == bundles[1]
    assert served.statuses() == [200, 200] and served.log[1][2] is None  # no date asked by
    assert "last_modified" not in json.loads((cache_dir(served.url) / "meta.json").read_text())


def test_a_changed_bundle_is_downloaded_then_asked_by_its_own_date(
    served: Served, bundles: tuple[bytes, bytes]
) -> None:
    served.put(bundles[0], age=60)
    assert fetch(served.url).downloaded
    served.put(bundles[1], age=30)
    got = fetch(served.url)
    assert got.downloaded and got.path.read_bytes() == bundles[1] and got.warning is None
    assert not fetch(served.url).downloaded
    assert served.statuses() == [200, 200, 304]  # was [200, 200, 200]
    assert served.log[1][2] != served.log[2][2]  # each copy asked by its own date


def test_a_download_refused_is_asked_by_its_date_not_downloaded_at_every_fetch(
    served: Served, bundles: tuple[bytes, bytes]
) -> None:
    served.put(bundles[0], age=60)
    assert fetch(served.url).downloaded
    served.put(b"no bundle at all " * 64, age=30)
    refused = [fetch(served.url) for _ in range(2)]
    assert all(not g.downloaded and g.path.read_bytes() == bundles[0] for g in refused)
    assert all("download refused" in str(g.warning) for g in refused)
    assert refused[0].warning == refused[1].warning
    assert served.statuses() == [200, 200, 304]  # was [200, 200, 200]


def test_a_store_that_sends_an_etag_is_asked_by_it(
    served: Served, bundles: tuple[bytes, bytes]
) -> None:
    served.etag = '"v1"'
    served.put(bundles[0], age=60)
    assert [fetch(served.url).downloaded for _ in range(2)] == [True, False]
    assert served.log == [(200, None, None), (304, '"v1"', None)]
    assert "last_modified" not in json.loads((cache_dir(served.url) / "meta.json").read_text())


@pytest.mark.parametrize(
    ("modified", "dated", "trusted"),
    [
        ("Mon, 07 Dec 2026 01:00:00 GMT", "Mon, 07 Dec 2026 01:00:10 GMT", True),
        ("Mon, 07 Dec 2026 01:00:00 GMT", "Mon, 07 Dec 2026 01:00:01 GMT", False),  # racy
        ("Mon, 07 Dec 2026 01:00:20 GMT", "Mon, 07 Dec 2026 01:00:10 GMT", False),  # after
        ("Mon, 07 Dec 2026 01:00:00 GMT", None, True),  # dated by this machine's clock
        ("Mon, 07 Dec 2100 01:00:00 GMT", None, False),
        ("yesterday", "Mon, 07 Dec 2026 01:00:10 GMT", False),
        ("9" * 5000, None, False),
        ("Mon, 07 Dec 2026 01:00:00 GMT", "9" * 40, False),
        ("Mon, 07 Dec 99999 01:00:00 GMT", None, False),
    ],
)
def test_a_last_modified_is_trusted_only_seconds_before_its_answer(
    modified: str, dated: str | None, trusted: bool
) -> None:
    """What a store says of its date is never a traceback; one not clearly before its
    answer is not asked by (the download is as before)."""
    from warmcli.bundle.remote_http import _trusted

    headers = {"Last-Modified": modified, **({"Date": dated} if dated else {})}
    now = 1797000000.0  # 2026-12-12, when no Date says
    assert _trusted(headers, now) == (modified if trusted else None)


def test_a_store_that_cannot_be_made_serves_the_last_good_copy(
    tmp_path: Path, bundles: tuple[bytes, bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    """AWS settings no S3 client is made from: the kept copy, with why, as before."""
    pytest.importorskip("boto3")
    url = "s3://bucket52f/b.warm"
    folder = cache_dir(url)
    folder.mkdir(parents=True, mode=0o700)
    (folder / "bundle.warm").write_bytes(bundles[0])
    (folder / "bundle.warm").chmod(0o600)
    monkeypatch.setenv("AWS_PROFILE", "warm-no-such-profile-52f")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    got = fetch(url)
    assert not got.downloaded and got.path.read_bytes() == bundles[0]
    assert "no S3 client" in str(got.warning) and "last good copy" in str(got.warning)
