"""`warm push` to an HTTP store reads the bundle's bytes once for its digests (sha256 and
the MD5 an object store checks), streamed, and once more as the PUT's body: never a
third time, never whole into memory. Against the stdlib HTTP store of test_remote."""

from __future__ import annotations

import base64
import hashlib
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from test_remote import Store, http_store  # noqa: F401  (a fixture)
from test_unused_kernel_ids import _tune

from warmcli.bundle import remote
from warmcli.bundle.received import CHUNK
from warmcli.bundle.store import Bundle


class _Counting:
    """A file opened for reading that counts the bytes read and the largest read."""

    def __init__(self, fh: Any, seen: list[int]) -> None:
        self._fh, self._seen = fh, seen

    def read(self, n: int = -1) -> bytes:
        data = self._fh.read(n)
        self._seen.append(len(data))
        return data  # type: ignore[no-any-return]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)

    def __enter__(self) -> _Counting:
        return self

    def __exit__(self, *exc: object) -> None:
        self._fh.close()


def test_push_reads_the_file_once_for_both_digests(
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, base, _ = http_store
    path = tmp_path / "b.warm"
    with Bundle.create(path) as bundle:
        bundle.put(tunes=[_tune(f"s{i}", "d", [hashlib.sha256(b"%d" % i).hexdigest()])
                          for i in range(2000)])  # fmt: skip
    size = path.stat().st_size
    assert size > 3 * CHUNK // 4
    seen: list[int] = []

    def counting_open(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        fh = open(file, mode, *args, **kwargs)  # noqa: SIM115  (handed back open)
        return _Counting(fh, seen) if Path(file) == path and "r" in mode else fh

    monkeypatch.setattr(remote, "open", counting_open, raising=False)
    digest, sent = remote.push(path, f"{base}/b.warm")
    body = path.read_bytes()
    assert store.files["/b.warm"] == body and digest == hashlib.sha256(body).hexdigest() and sent
    md5 = base64.b64encode(hashlib.md5(body).digest()).decode()
    assert store.puts[-1]["Content-MD5"] == md5
    assert sum(seen) <= 2 * size  # the digests' pass and the PUT's body, no more
    assert max(seen) <= CHUNK  # streamed
