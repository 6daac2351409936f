"""A hostile review of remote stores and their secrets (review52c), against real servers on
127.0.0.1 (test_review42d's `Server`) and the real CLI.

What it found:
- a host no lookup takes (`https://a..b/`, a label over 63 characters, `%E2%82%AC.example`
  decoding to no ASCII), named by the URL, by a store's redirect or by the environment's
  proxy (`https_proxy=http://a..b:3128`), raised `UnicodeError` out of urlopen: a traceback
  from `warm pull`, and in production no `RemoteError`, so no last good copy was served;
- botocore names its endpoint whole in an error (`Could not connect to the endpoint URL:
  "http://u:pass@host/..."`): `AWS_ENDPOINT_URL`'s password reached the error line;
- a header http.client refuses is echoed whole (`Invalid header value b'...'`): an
  `AWS_SESSION_TOKEN` read from a CRLF file (its CR kept) reached the error line whole;
- a URL with a slash too many (`https:///u:pass@host/b.warm`) is read as naming no host,
  its credentials in its path: `shown` showed them, in the refusal that it names no host.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_review42d import Server, body, servers  # noqa: F401  (fixtures)

from warmcli.bundle.location import shown, url_text
from warmcli.bundle.remote import fetch, push
from warmcli.errors import RemoteError

_NO_LOOKUP = ("https://a..b/x.warm", f"https://{'x' * 64}.example/x.warm")


@pytest.fixture
def home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A WARM_HOME of the test's own, and no proxy the environment names."""
    for name in ("http_proxy", "https_proxy", "no_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_a_host_no_lookup_takes_is_refused_in_one_line(
    warm: Warm,
    home: Path,
    tmp_path: Path,
    body: bytes,  # noqa: F811
    servers: list[Server],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for url in (*_NO_LOOKUP, "https://%E2%82%AC.example/x.warm"):
        with pytest.raises(RemoteError, match="no name a lookup takes"):
            url_text(url)
    proc = warm("pull", _NO_LOOKUP[0], tmp_path / "x.warm")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "no name a lookup takes" in proc.stderr, proc.stderr
    # a store that redirects there: its last good copy is served, as for any store that fails
    store = Server(body)
    servers.append(store)
    assert fetch(store.base + "/b.warm").downloaded
    for to in _NO_LOOKUP:
        store.routes["/b.warm"] = to
        got = fetch(store.base + "/b.warm")
        assert not got.downloaded and "refused" in str(got.warning), got.warning
    # the environment's proxy: the store is unreachable, said in one line
    monkeypatch.setenv("https_proxy", "http://a..b:3128")
    with pytest.raises(RemoteError, match=r"store unreachable.*no host name a lookup takes"):
        fetch("https://example.invalid/x.warm")


def _aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, **env: str) -> None:
    """The AWS variables an `s3://` URL's client reads: `env` over test credentials, no
    profile or config file of this machine's; boto3's default session (which keeps the
    credentials it first read) made anew."""
    boto3 = pytest.importorskip("boto3")
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    for name in ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.setenv(name, str(tmp_path / "none"))
    given = {"AWS_ACCESS_KEY_ID": "AKIDTEST", "AWS_SECRET_ACCESS_KEY": "Sk9Secret"}
    for name, value in {**given, "AWS_DEFAULT_REGION": "us-east-1", **env}.items():
        monkeypatch.setenv(name, value)


def test_an_s3_endpoint_s_password_is_never_shown(
    home: Path,
    tmp_path: Path,
    body: bytes,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """botocore names its endpoint whole (`Could not connect to the endpoint URL:
    "http://u:pass@host/..."`, `Invalid endpoint: ...`): said as every URL is shown."""
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(body)
    for endpoint in ("http://u:Ep9Secret@127.0.0.1:9", "https://u:Ep9Secret@a..b"):
        _aws(monkeypatch, tmp_path, AWS_ENDPOINT_URL=endpoint)
        for act in (lambda: fetch("s3://bkt/b.warm"), lambda: push(bundle, "s3://bkt/b.warm")):
            with pytest.raises(RemoteError) as refused:
                act()
            assert "Ep9Secret" not in str(refused.value), refused.value
            assert "u:***@" in str(refused.value), refused.value


def test_a_credential_no_header_takes_is_never_shown(
    home: Path,
    tmp_path: Path,
    body: bytes,  # noqa: F811
    servers: list[Server],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A session token read from a file of CRLF lines keeps its CR: http.client refuses the
    header, echoing its value whole (`Invalid header value b'...'`), as it does the
    `Authorization` (key id and signature) of an access key id holding a line break."""
    store = Server(body)
    servers.append(store)
    for given in ({"AWS_SESSION_TOKEN": "Tk9Secret\r"}, {"AWS_ACCESS_KEY_ID": "AKIDX\n"}):
        _aws(monkeypatch, tmp_path, AWS_ENDPOINT_URL=store.base, **given)
        with pytest.raises(RemoteError, match=r"Invalid header value \(not shown") as refused:
            fetch("s3://bkt/b.warm")
        assert "Tk9Secret" not in str(refused.value), refused.value
        assert "Signature" not in str(refused.value), refused.value
    assert store.seen == []  # (refused before it was sent)


def test_a_password_after_a_slash_too_many_is_never_shown(warm: Warm, tmp_path: Path) -> None:
    """`https:///u:pass@host/b.warm` (a base URL joined to a path with its `/`): a URL
    naming no host, refused so, its netloc read as empty and the password in its path."""
    for url in ("https:///u:Pw9Secret@h/b.warm", "https:////u:Pw9Secret@h/b.warm"):
        assert shown(url) == url.replace("Pw9Secret", "***"), shown(url)
        with pytest.raises(RemoteError, match="names no host") as refused:
            url_text(url)
        assert "Pw9Secret" not in str(refused.value), refused.value
    proc = warm("pull", "https:///u:Pw9Secret@h/b.warm", tmp_path / "x.warm")
    assert proc.returncode == 2 and "names no host" in proc.stderr, proc.stderr
    assert "Pw9Secret" not in proc.stderr, proc.stderr
    assert shown("https:///") == "https:///" and shown("s3:///a/b") == "s3:///a/b"
