"""A fleet's read-merge-push never loses another job's push (stop 61), against the real CLI
and real stores on 127.0.0.1 (`test_remote`'s HTTP store with ETags, moto's S3 server).

The README's fleet pattern, `warm merge URL new.warm -o next.warm && warm push next.warm URL`,
run by two CI jobs at once: job B pushed between job A's merge and A's push. A's push was
conditional only on what the store's HEAD said at push time, so it replaced B's push and B's
kernels and tunes were gone from the store (exit 0). Now `merge` records in OUT which version
of the URL it merged, and a push of OUT to that URL is conditional on it: A is refused in one
line (merge again), nothing lost; `--force` pushes anyway.
"""

from __future__ import annotations

import json
import os
import sqlite3
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's, commands forked)
from test_remote import Store, built, http_store, s3  # noqa: F401  (fixtures)

from warmcli.bundle.merged_from import KEY, parse

Served = tuple[Store, str, ThreadingHTTPServer]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, bytes, bytes]:
    """What the store holds first (the small many-kernels example, whole), what job A adds
    (the host matmul example, whole) and what job B adds (the many-kernels example with
    more kernels: an operation and kernels the first lacks), as bundle bytes."""
    folder = tmp_path_factory.mktemp("fleet61")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    made = []
    for name, example, kernels in (("s", "many", "5"), ("a", "matmul", "5"), ("b", "many", "10")):
        warm = Warm(dict(env, WARM_HOME=str(folder / "home"), WARM_EXAMPLE_KERNELS=kernels))
        path = folder / f"{name}.warm"
        file = EXAMPLES / ("many_kernels_host.py" if example == "many" else "matmul_host.py")
        proc = warm("run", file, "-b", path, "-q")
        assert proc.returncode == 0, proc.stderr
        made.append(path.read_bytes())
    return made[0], made[1], made[2]


def _held(warm: Any, bundle: Path) -> tuple[set[str], set[str]]:
    """The kernel keys and tune operations a bundle holds (`warm stats --json`)."""
    doc = warm.json("stats", bundle)
    return {k["key"] for k in doc["kernels"]}, {t["operation"] for t in doc["tunes"]}


def _race(warm: Any, tmp_path: Path, url: str, jobs: tuple[bytes, bytes, bytes]) -> Any:
    """Job A merges, job B merges and pushes, then A pushes: A's push's process."""
    for name, data in (("a", jobs[1]), ("b", jobs[2])):
        (tmp_path / f"{name}.warm").write_bytes(data)
    job = {n: warm.with_env(WARM_HOME=str(tmp_path / f"home-{n}")) for n in "ab"}
    for n in "ab":  # each job's merge of what the store holds now with what it made
        proc = job[n]("merge", url, tmp_path / f"{n}.warm", "-o", tmp_path / f"{n}-next.warm")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        if n == "b":  # B's push lands between A's merge and A's push
            proc = job[n]("push", tmp_path / "b-next.warm", url)
            assert proc.returncode == 0, proc.stdout + proc.stderr
    return job["a"]("push", tmp_path / "a-next.warm", url)


@pytest.mark.parametrize("kind", ["https", "s3"])
def test_a_push_between_merge_and_push_is_never_lost(
    kind: str,
    request: pytest.FixtureRequest,
    warm: Warm,
    tmp_path: Path,
    jobs: tuple[bytes, bytes, bytes],
) -> None:
    if kind == "s3":
        request.getfixturevalue("s3")
        url = "s3://fleet/fleet.warm"
        first = tmp_path / "s.warm"
        first.write_bytes(jobs[0])
        assert warm("push", first, url).returncode == 0
    else:
        store, base, _ = request.getfixturevalue("http_store")
        url = f"{base}/fleet.warm"
        store.files["/fleet.warm"] = jobs[0]
    proc = _race(warm, tmp_path, url, jobs)
    # Before: exit 0, A's merge over B's push: B's operation gone from the store.
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert f"{url} changed since {tmp_path / 'a-next.warm'} was merged from it" in proc.stderr
    assert "merge again" in proc.stderr and "--force" in proc.stderr
    pulled = tmp_path / "pulled.warm"
    assert warm("pull", url, pulled).returncode == 0
    assert pulled.read_bytes() == (tmp_path / "b-next.warm").read_bytes()  # B's, whole
    # A merges again (what the store holds now, B's push with it), and pushes: both held.
    job_a = warm.with_env(WARM_HOME=str(tmp_path / "home-a"))
    again = job_a("merge", url, tmp_path / "a.warm", "-o", tmp_path / "a-next.warm", "--force")
    assert again.returncode == 0, again.stdout + again.stderr
    done = job_a("push", tmp_path / "a-next.warm", url)
    assert done.returncode == 0 and "pushed" in done.stdout, done.stdout + done.stderr
    pulled.unlink()
    assert warm("pull", url, pulled).returncode == 0
    kernels, tunes = _held(warm, pulled)
    for data, name in zip(jobs, "sab", strict=True):
        (tmp_path / f"{name}-own.warm").write_bytes(data)
        own_kernels, own_tunes = _held(warm, tmp_path / f"{name}-own.warm")
        assert own_kernels <= kernels and own_tunes <= tunes, name


def test_force_pushes_over_a_changed_store_and_an_unrecorded_push_is_as_before(
    warm: Warm,
    tmp_path: Path,
    http_store: Served,  # noqa: F811
    jobs: tuple[bytes, bytes, bytes],
) -> None:
    store, base, _ = http_store
    url = f"{base}/fleet.warm"
    store.files["/fleet.warm"] = jobs[0]
    assert _race(warm, tmp_path, url, jobs).returncode == 2
    proc = warm("push", tmp_path / "a-next.warm", url, "--force")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert store.files["/fleet.warm"] == (tmp_path / "a-next.warm").read_bytes()
    # A bundle merged from no URL (b.warm as run) is pushed as before: over what is there.
    assert warm("push", tmp_path / "b.warm", url).returncode == 0
    assert store.files["/fleet.warm"] == jobs[2]
    # Merged from another URL: no condition on this one.
    store.files["/other.warm"] = jobs[0]
    other = tmp_path / "other-next.warm"
    assert warm("merge", f"{base}/other.warm", tmp_path / "a.warm", "-o", other).returncode == 0
    store.files["/fleet.warm"] = jobs[1]
    assert warm("push", other, url).returncode == 0
    assert store.files["/fleet.warm"] == other.read_bytes()


def _manifest(bundle: Path) -> dict[str, str]:
    with sqlite3.connect(bundle) as conn:
        return dict(conn.execute("SELECT key, value FROM manifest"))


def test_the_record_names_no_credentials_and_read_back_is_untrusted(
    warm: Warm,
    tmp_path: Path,
    http_store: Served,  # noqa: F811
    jobs: tuple[bytes, bytes, bytes],
) -> None:
    store, base, _ = http_store
    store.files["/fleet.warm?token=abc"] = jobs[0]  # (this store serves a query's path)
    secret = base.replace("http://", "http://ci:hunter2@") + "/fleet.warm?token=abc"
    out = tmp_path / "next.warm"
    (tmp_path / "a.warm").write_bytes(jobs[1])
    assert warm("merge", secret, tmp_path / "a.warm", "-o", out).returncode == 0
    value = _manifest(out)[KEY]
    assert "hunter2" not in value and "token" not in value
    (origin,) = parse(value)
    assert origin.url == f"{base}/fleet.warm" and origin.etag and len(origin.sha256) == 64
    stats = warm.json("stats", out)  # shown as the text it is; verify and check take it
    assert json.loads(stats["manifest"][KEY])[0]["url"] == origin.url
    assert warm("verify", out).returncode == 0
    assert warm("check", out).returncode == 0
    # A record that is no record warm writes (a hostile bundle's) is none: pushed as before.
    for hostile in ("[" * 4000, "[{]", json.dumps([{"url": origin.url, "etag": 1}])):
        _set_record(out, hostile)
        assert parse(hostile) == []
        store.files["/fleet.warm"] = jobs[2]
        proc = warm("push", out, f"{base}/fleet.warm")
        assert proc.returncode == 0, proc.stdout + proc.stderr
    # An ETag no header holds (a terminal's escape: stop 62, `merged_from.is_etag`) is none
    # either; one that is a condition, said in the refusal.
    escape = {"url": origin.url, "etag": "\x1b]0;pwned\x07", "sha256": "0" * 64}
    assert parse(json.dumps([escape])) == []
    _set_record(out, json.dumps([dict(escape, etag='"old\\x1b"')]))
    store.files["/fleet.warm"] = jobs[2]  # another job's push, whose kernels OUT lacks
    proc = warm("push", out, f"{base}/fleet.warm")
    assert proc.returncode == 2 and "changed since" in proc.stderr, proc.stdout + proc.stderr
    assert "\x1b" not in proc.stderr and '(from "old\\x1b")' in proc.stderr


def _set_record(bundle: Path, value: str) -> None:
    with sqlite3.connect(bundle) as conn:
        conn.execute("UPDATE manifest SET value = ? WHERE key = ?", (value, KEY))


def test_a_merged_bundle_merged_again_keeps_its_condition(
    warm: Warm,
    tmp_path: Path,
    http_store: Served,  # noqa: F811
    jobs: tuple[bytes, bytes, bytes],
) -> None:
    """`next.warm`, merged from URL, merged again with a local bundle (`-o next2.warm`): a
    push of the result is still conditional on the version merged (the second merge
    dropped the record: the push went over another job's, exit 0)."""
    store, base, _ = http_store
    url = f"{base}/fleet.warm"
    store.files["/fleet.warm"] = jobs[0]
    for name, data in (("a", jobs[1]), ("b", jobs[2])):
        (tmp_path / f"{name}.warm").write_bytes(data)
    first, again = tmp_path / "next.warm", tmp_path / "next2.warm"
    assert warm("merge", url, tmp_path / "a.warm", "-o", first).returncode == 0
    assert warm("merge", first, tmp_path / "b.warm", "-o", again).returncode == 0
    assert parse(_manifest(again)[KEY]) == parse(_manifest(first)[KEY])
    store.files["/fleet.warm"] = jobs[2]  # another job's push
    proc = warm("push", again, url)
    assert proc.returncode == 2 and f"{url} changed since {again}" in proc.stderr, proc.stderr
    assert store.files["/fleet.warm"] == jobs[2]
