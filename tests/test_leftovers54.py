"""Faults the helpers of stop 54 found and left, fixed afterwards, each with its test."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from raw_store import RawStore

from warmcli.bundle.remote import RemoteError, fetch


class _Looping(RawStore):
    """An S3 endpoint that answers every request with a redirect to itself."""

    threaded = True

    def answer(self, conn: socket.socket, request: bytes) -> None:
        path = request.split(b" ")[1]
        where = self.endpoint.encode() + path
        conn.sendall(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: %s\r\n" % where)
        conn.sendall(b"Content-Length: 0\r\n\r\n")


def test_an_s3_store_redirecting_in_a_loop_is_named_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """botocore follows a bucket's redirects by recursion: a store redirecting to itself ended
    in Python's recursion limit, said as "the store's answer is unreadable (maximum recursion
    depth exceeded ...)" (hostile54's find); now the loop is named."""
    pytest.importorskip("boto3")
    store = _Looping()
    env = {
        "WARM_HOME": f"{tmp_path}/home", "AWS_ENDPOINT_URL": store.endpoint,
        "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1", "WARM_REMOTE_DEADLINE": "20",
    }  # fmt: skip
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    try:
        with pytest.raises(RemoteError) as caught:
            fetch("s3://fleet/b.warm")
    finally:
        store.close()
    assert str(caught.value) == "s3://fleet/b.warm: the store redirects in a loop", caught.value


def test_a_compiler_silent_on_version_is_asked_again_after_a_while(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compiler that timed out on `--version` was never asked again by the process while its
    file kept its stamp (hostile54's fix): one late answer (a toolkit on a cold network mount)
    left a service unable to compile a miss for its life (review54a's find). Now it is asked
    again after `SILENT_SECONDS` (here 1 s, a real script that hangs, counting its starts)."""
    from warmcli.backends import version_line as module
    from warmcli.errors import ToolchainError

    monkeypatch.setattr(module, "SILENT_SECONDS", 1.0)
    starts = tmp_path / "starts"
    cc = tmp_path / "silent-cc"
    cc.write_text(f"#!/bin/sh\necho started >> {starts}\nexec sleep 30\n")
    cc.chmod(0o755)
    for pause in (0.0, 0.0, 1.2):
        time.sleep(pause)
        with pytest.raises(ToolchainError, match="did not answer --version"):
            module.version_line("cc", str(cc), 0.3)
    assert starts.read_text().count("started") == 2  # the first, and the one after a while
