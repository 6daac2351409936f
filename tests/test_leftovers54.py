"""Faults the helpers of stop 54 found and left, fixed afterwards, each with its test."""

from __future__ import annotations

import socket

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
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
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
