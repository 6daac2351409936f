"""A raw HTTP store on 127.0.0.1 for the remote tests: each connection accepted, its request
read, and `answer(conn, request)` writing what the store says, byte for byte (a test's
subclass misbehaves there). Started at once, in a daemon thread; `close` stops it.
`warm_waiting` runs the real CLI against one with warm's wait for a store (`TIMEOUT`) made
long, so a test tells a wait the deadline ended from one `TIMEOUT` ended by far more than a
slow machine's start."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
from pathlib import Path

# `python -m warmcli ARGS` with each wait for a store (`TIMEOUT`, 10 s) set to `argv[1]` s first
_WAITING = """
import runpy, sys
import warmcli.bundle.http_open as opened, warmcli.bundle.remote_http as http
opened.TIMEOUT = http.TIMEOUT = float(sys.argv.pop(1))
runpy.run_module("warmcli", run_name="__main__", alter_sys=True)
"""


def warm_waiting(
    env: dict[str, str], *args: str | Path, wait: float, timeout: float
) -> subprocess.CompletedProcess[str]:
    """`warm ARGS` in `env` (a process of its own), each wait for a store `wait` s where warm
    waits `TIMEOUT`: a store that drips a TLS handshake, which `ssl` bounds by one such wait,
    holds it `wait` s unless the deadline ends it."""
    return subprocess.run(
        [sys.executable, "-c", _WAITING, str(wait), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=Path(__file__).resolve().parent.parent,
    )


class RawStore:
    """See the module doc. `url` is `/b.warm` on it, `endpoint` the server's root."""

    threaded = False  # each connection answered in a thread of its own

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.endpoint}/b.warm"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            if self.threaded:
                threading.Thread(target=self._one, args=(conn,), daemon=True).start()
            else:
                self._one(conn)

    def _one(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            self.answer(conn, conn.recv(65536))

    def answer(self, conn: socket.socket, request: bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.server.close()
