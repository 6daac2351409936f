"""A download of a URL's bundle is bounded, against a real HTTP server on 127.0.0.1 and
the real CLI: a store that streams without end stops at `WARM_REMOTE_MAX_SIZE`, one that
drips or never answers stops at `WARM_REMOTE_DEADLINE`; either is one line (or, with a
last good copy, that copy served with a warning), and no temporary file stays behind (one
a killed fetch left is removed by the next fetch).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from forked_cli import forked_made  # noqa: F401  (conftest's `made`, commands forked)


class _Serve:
    """What the server does now (`mode`), and the bundle it serves in mode "ok"."""

    def __init__(self, body: bytes) -> None:
        self.mode, self.body, self.stop = "ok", body, threading.Event()


def _handler(serve: _Serve) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with contextlib.suppress(OSError):  # the client went away
                self._answer()

        def _answer(self) -> None:
            body, mode = serve.body, serve.mode
            if mode == "silent":
                serve.stop.wait(60)
                return
            self.send_response(200)
            if mode == "ok":
                self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", '"one"')
                self.end_headers()
                self.wfile.write(body)
            elif mode == "endless":  # no Content-Length: zeros until the client hangs up
                self.end_headers()
                while not serve.stop.is_set():
                    self.wfile.write(b"\0" * 65536)
            elif mode == "drip":  # the right length, 100 bytes every 0.1 s
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                for i in range(0, len(body), 100):
                    if serve.stop.is_set():
                        return
                    self.wfile.write(body[i : i + 100])
                    self.wfile.flush()
                    time.sleep(0.1)
            elif mode == "huge":  # announces more than the cap
                self.send_header("Content-Length", str(10**15))
                self.end_headers()
                self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def served(made: tuple[Warm, Path]) -> Iterator[tuple[_Serve, str]]:
    serve = _Serve(made[1].read_bytes())
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(serve))
    threading.Thread(target=server.serve_forever, daemon=True, args=(0.05,)).start()
    yield serve, f"http://127.0.0.1:{server.server_address[1]}/b.warm"
    serve.stop.set()
    server.shutdown()
    server.server_close()


def _bounded(made: tuple[Warm, Path], tmp_path: Path, **env: str) -> tuple[Warm, Path]:
    home = tmp_path / "home"
    return made[0].with_env(WARM_HOME=str(home), **env), home  # (forked, as `made`'s)


def _temporaries(home: Path) -> list[Path]:
    return sorted(p for p in (home / "remote").glob("*/*") if p.name.endswith(".tmp"))


def test_an_endless_download_stops_at_the_size_cap(
    made: tuple[Warm, Path], served: tuple[_Serve, str], tmp_path: Path
) -> None:
    serve, url = served
    warm, home = _bounded(made, tmp_path, WARM_REMOTE_MAX_SIZE="2M")
    serve.mode = "endless"
    began = time.monotonic()
    proc = warm("stats", url, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "WARM_REMOTE_MAX_SIZE" in lines[0], proc.stderr
    assert time.monotonic() - began < 30
    assert _temporaries(home) == []
    serve.mode = "huge"  # announced too long: refused before a byte is kept
    proc = warm("stats", url, timeout=60)
    assert proc.returncode == 2 and "WARM_REMOTE_MAX_SIZE" in proc.stderr, proc.stderr
    assert _temporaries(home) == []


def test_a_dripping_download_stops_at_the_deadline_and_the_last_good_copy_serves(
    made: tuple[Warm, Path], served: tuple[_Serve, str], tmp_path: Path
) -> None:
    serve, url = served
    warm, home = _bounded(made, tmp_path, WARM_REMOTE_DEADLINE="1", WARM_REMOTE_MAX_SIZE="2M")
    assert warm("stats", url).returncode == 0  # a good copy is cached
    for mode in ("drip", "endless"):
        serve.mode = mode
        began = time.monotonic()
        proc = warm("stats", url, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert "using the last good copy" in proc.stderr, proc.stderr
        assert time.monotonic() - began < 30
        assert _temporaries(home) == []
    serve.mode = "drip"
    fresh = warm.with_env(WARM_HOME=str(tmp_path / "fresh"))
    proc = fresh("stats", url, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "WARM_REMOTE_DEADLINE" in lines[0], proc.stderr
    assert _temporaries(tmp_path / "fresh") == []


def test_a_fetch_removes_what_a_killed_fetch_left(
    made: tuple[Warm, Path], served: tuple[_Serve, str], tmp_path: Path
) -> None:
    _, url = served
    warm, home = _bounded(made, tmp_path)
    assert warm("stats", url).returncode == 0
    (folder,) = (home / "remote").iterdir()
    left = folder / "tmpab12cd34.tmp"
    left.write_bytes(b"\0" * 1000)
    assert warm("stats", url).returncode == 0
    assert _temporaries(home) == []


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("WARM_REMOTE_MAX_SIZE", "ten"),
        ("WARM_REMOTE_DEADLINE", "-1"),
        ("WARM_REMOTE_DEADLINE", "x"),
    ],
)
def test_a_bad_bound_is_one_line(
    made: tuple[Warm, Path], served: tuple[_Serve, str], tmp_path: Path, name: str, value: str
) -> None:
    _, url = served
    warm, _ = _bounded(made, tmp_path, **{name: value})
    proc = warm("stats", url)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and name in lines[0] and "Traceback" not in proc.stderr, proc.stderr


def test_a_store_that_never_answers_stops_at_a_deadline_under_the_read_wait(
    made: tuple[Warm, Path], served: tuple[_Serve, str], tmp_path: Path
) -> None:
    serve, url = served
    warm, home = _bounded(made, tmp_path, WARM_REMOTE_DEADLINE="1")
    serve.mode = "silent"  # each read would wait 10 s: the 1 s deadline comes first
    began = time.monotonic()
    proc = warm("stats", url, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert time.monotonic() - began < 7
    assert _temporaries(home) == []
