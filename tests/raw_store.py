"""A raw HTTP store on 127.0.0.1 for the remote tests: each connection accepted, its request
read, and `answer(conn, request)` writing what the store says, byte for byte (a test's
subclass misbehaves there). Started at once, in a daemon thread; `close` stops it."""

from __future__ import annotations

import contextlib
import socket
import threading


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
