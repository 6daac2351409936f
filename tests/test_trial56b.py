"""Trial 56b (a fleet operator, then an attacker, from the README): a URL's password or token
given where a local path belongs was said in part. `withheld` hid the text only where a message
named it whole: a message naming a folder of it (`no directory https: (warm creates only the
bundle's own directory, user:PW@host)`, from `pull URL PATH`, `run -b`, `merge -o` and
`keygen`), or the option spelled `--bundle=https:/user:PW@host/b.warm`, showed the password
as given. `warm push URL URL` and `warm pull URL URL` read a URL as a path. And `warm merge URL
... -o OUT` merged a URL's last good copy where the store failed (exit 0, one warning): that
merge, pushed, put an older bundle back over what others had pushed meanwhile. The real CLI
(forked), each command in a scratch folder of its own; a real HTTP store on 127.0.0.1."""

from __future__ import annotations

from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's, commands forked)
from test_remote import Store, http_store  # noqa: F401  (a fixture)

WORKLOAD = str(EXAMPLES / "matmul_host.py")
URL = "http://127.0.0.1:9/fleet.warm"  # (never asked: each command fails before)


@pytest.mark.parametrize(
    "args",
    [
        ("pull", URL, "https://user:PW56b@store.example/b.warm"),  # a URL's place
        ("pull", URL, "https:/user:PW56b@store.example/b.warm"),  # a slash too few
        ("pull", URL, "https://user:PW/56b@store.example/b.warm"),  # `/` unencoded
        ("run", WORKLOAD, "-b", "https:/user:PW56b@store.example/b.warm"),
        ("run", WORKLOAD, "--bundle=https:/user:PW56b@store.example/b.warm"),
        ("run", WORKLOAD, "-bhttps://user:PW56b@store.example/b.warm"),
        ("merge", "a.warm", "-o", "https:/user:PW56b@store.example/b.warm"),
        ("keygen", "https://PW56b@store.example/ci.key"),  # a token alone
        ("stats", "--json", "--", "https:/user:PW56b@store.example/b.warm"),
    ],
)
def test_a_url_given_for_a_path_never_shows_its_secret(
    warm: Warm, tmp_path: Path, args: tuple[str, ...]
) -> None:
    """Each one line, exit 2, nothing made; the password in no part of what is said
    (before: `..., user:PW56b@store.example)`, and `--bundle=` said the whole URL)."""
    proc = warm(*args, cwd=tmp_path)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, said
    assert "PW" not in said and "56b" not in said and "Traceback" not in said, said
    assert "***" in said, said
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())


@pytest.mark.parametrize(
    "args, said",
    [
        (("push", URL, "s3://fleet/b.warm"), f"{URL} is a URL: push publishes a local bundle"),
        (("pull", URL, "s3://fleet/b.warm"), "s3://fleet/b.warm is a URL: pull writes a local"),
    ],
)
def test_a_url_where_push_or_pull_takes_a_local_bundle_is_said_to_be_one(
    warm: Warm, tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    """As `merge -o URL` and `sign URL` say; before, push read it as the path `Path` makes of
    it (`http:/127.0.0.1:9/fleet.warm: no such bundle`) and pull said there was `no directory
    http:` (or, where one was, wrote a local file named as the URL)."""
    proc = warm(*args, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith(f"warm: error: {said}"), proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_merge_never_takes_a_urls_last_good_copy(
    warm: Warm,
    tmp_path: Path,
    built_once: tuple[bytes, bytes],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    """A fleet's `warm merge URL new.warm -o next.warm && warm push next.warm URL`: where the
    store then sends no sound bundle (or cannot be reached), the merge used to take the copy
    an earlier command kept (exit 0, one warning), and its push dropped what the store had
    gained since. Now it merges nothing, as `pull` pulls nothing: one line, exit 2, OUT as
    it was; a reader (`diff`) still falls back to that copy, with its warning."""
    store, base, _ = http_store
    url, shard, out = f"{base}/fleet.warm", tmp_path / "shard.warm", tmp_path / "next.warm"
    shard.write_bytes(built_once[1])
    store.files["/fleet.warm"] = built_once[0]
    assert warm("merge", url, shard, "-o", out).returncode == 0  # its copy kept
    before = out.read_bytes()
    store.files["/fleet.warm"] = b"not a bundle" * 100  # (the store's answer, refused)
    proc = warm("merge", url, shard, "-o", out, "--force")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stdout + proc.stderr
    assert "download refused" in proc.stderr and "nothing merged into" in proc.stderr
    assert out.read_bytes() == before and proc.stdout == ""
    diff = warm("diff", url, shard)
    assert diff.returncode == 0 and "using the last good copy" in diff.stderr, diff.stderr
