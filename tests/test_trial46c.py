"""A new user's fleet trial (stop 46): shards merged, signed, pushed to an object store,
pulled and served by URL, keys rotated, versions diffed, the store broken.

Real parts only: the CLI in subprocesses, the system cc, SQLite files and moto's S3 server
on 127.0.0.1 (a versioned bucket, as a fleet keeping its published bundles has).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


@pytest.fixture(scope="module")
def moto() -> Iterator[tuple[dict[str, str], Any]]:
    """moto's S3 server on 127.0.0.1 (one for this module) with a versioned bucket `fleet`:
    the AWS variables naming it, and boto3's client of it."""
    boto3 = pytest.importorskip("boto3")
    moto_server = pytest.importorskip("moto.server")
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    aws = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    client = boto3.client(
        "s3",
        endpoint_url=aws["AWS_ENDPOINT_URL"],
        aws_access_key_id="test",
        aws_secret_access_key="test",
        region_name="us-east-1",
    )
    client.create_bucket(Bucket="fleet")
    client.put_bucket_versioning(Bucket="fleet", VersioningConfiguration={"Status": "Enabled"})
    yield aws, client
    server.stop()


@pytest.fixture
def store(warm: Warm, moto: tuple[dict[str, str], Any]) -> Any:
    """boto3's client of `moto`'s store, warm's environment naming it (each test its own
    objects in the bucket)."""
    aws, client = moto
    warm.env.update(aws)
    return client


def _signed(warm: Warm, host_bundle: Callable[[Path], Path], tmp_path: Path) -> tuple[Path, Path]:
    """The host example's bundle and a copy of it signed by a new key: (signed, its .pub)."""
    key = tmp_path / "keys" / "ci.key"
    assert warm("keygen", key).returncode == 0
    signed = host_bundle(tmp_path / "signed.warm")
    done = warm("sign", signed, "--key", key)
    assert done.returncode == 0, done.stderr
    return signed, Path(f"{key}.pub")


def _one_line(proc: Any, code: int = 2) -> str:
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, (
        proc.stderr
    )
    return str(proc.stderr)


def test_s3_version_id_names_that_version_and_any_other_query_is_refused(
    store: Any, warm: Warm, host_bundle: Callable[[Path], Path], tmp_path: Path
) -> None:
    """`warm diff 's3://fleet/b.warm?versionId=OLD' s3://fleet/b.warm` compared the newest
    object with itself: the query was dropped, `?versionId=` (and any typo) served the
    newest version, and the diff said the two versions held the same."""
    plain = host_bundle(tmp_path / "plain.warm")
    signed, _ = _signed(warm, host_bundle, tmp_path)
    assert warm("push", plain, "s3://fleet/b.warm").returncode == 0
    old = store.head_object(Bucket="fleet", Key="b.warm")["VersionId"]
    assert warm("push", signed, "s3://fleet/b.warm").returncode == 0
    assert store.head_object(Bucket="fleet", Key="b.warm")["VersionId"] != old

    got = tmp_path / "got" / "old.warm"
    proc = warm("pull", f"s3://fleet/b.warm?versionId={old}", got)
    assert proc.returncode == 0, proc.stderr
    assert got.read_bytes() == plain.read_bytes()  # that version, not the newest
    said = _one_line(warm("stats", "s3://fleet/b.warm?versionId=nosuch"))
    assert "?***" in said and "nosuch" not in said and "no such version" in said, said
    said = _one_line(warm("stats", "s3://fleet/b.warm?version=1"))
    assert "?***" in said and "versionId" in said, said  # what it takes
    said = _one_line(warm("push", plain, f"s3://fleet/b.warm?versionId={old}"))
    assert "versionId" in said and "not pushed" in said, said


def test_pull_under_trusted_keys_refuses_a_bundle_they_did_not_sign_with_no_copy_kept(
    store: Any, warm: Warm, host_bundle: Callable[[Path], Path], tmp_path: Path
) -> None:
    """README: under trusted keys a download they did not sign is refused, `warm pull`
    pulling nothing (exit 2). With no last good copy in WARM_HOME, `pull` copied the
    unsigned bundle over PATH, a bundle they signed, and said `pulled` (exit 0)."""
    signed, pub = _signed(warm, host_bundle, tmp_path)
    plain = host_bundle(tmp_path / "plain.warm")
    assert warm("push", plain, "s3://fleet/team.warm").returncode == 0
    here = tmp_path / "prod" / "app.warm"
    here.parent.mkdir()
    shutil.copyfile(signed, here)
    keyed = warm.with_env(WARM_TRUSTED_KEYS=str(pub))
    for _ in range(2):  # the download refused, then the copy kept of it: refused both times
        said = _one_line(keyed("pull", "s3://fleet/team.warm", here))
        assert "not signed" in said or "unsigned" in said, said
        assert "nothing pulled" in said, said
        assert here.read_bytes() == signed.read_bytes()  # as it was
    assert not (tmp_path / "prod" / "team.warm").exists()
    # without the keys, it is pulled as before
    assert warm("pull", "s3://fleet/team.warm", here).returncode == 0
    assert here.read_bytes() == plain.read_bytes()


def test_merge_of_urls_names_each_input_by_its_url_in_every_line(
    store: Any, warm: Warm, host_bundle: Callable[[Path], Path], tmp_path: Path
) -> None:
    """`warm merge s3://.../shard0.warm s3://.../shard1.warm -o fleet.warm` named its inputs
    by URL (`from s3://...`) but a kernel built to two binaries by the local copies in
    WARM_HOME (`kept the binary ... of /home/.../remote/809b.../bundle.warm, dropped ... of
    .../remote/c15a.../bundle.warm`): which shard's was kept could not be told."""
    whole = host_bundle(tmp_path / "whole.warm")
    shard = tmp_path / "shard0.warm"  # built in other batches: other binaries, same keys
    done = warm("run", EXAMPLES / "matmul_host.py", "--shard", "0/2", "-b", shard, "-q")
    assert done.returncode == 0, done.stderr
    for name, bundle in (("whole", whole), ("shard0", shard)):
        assert warm("push", bundle, f"s3://fleet/{name}.warm").returncode == 0
    urls = ["s3://fleet/whole.warm", "s3://fleet/shard0.warm"]
    proc = warm("merge", *urls, "-o", tmp_path / "fleet.warm")
    assert proc.returncode == 0, proc.stderr
    assert "kept the binary" in proc.stdout  # (what this test is of)
    assert "/remote/" not in proc.stdout.replace("\n", "") + proc.stderr
    doc = warm.json("merge", *urls, "-o", tmp_path / "again.warm")
    kept = [line for line in doc["mended"] if "kept the binary" in line]
    assert kept, doc
    for line in kept:
        assert f"of {urls[0]}, dropped" in line and line.endswith(f"of {urls[1]}"), line
    assert "/remote/" not in json.dumps(doc)
    # refused under trusted keys: the input named by its URL, not by its local copy
    _, pub = _signed(warm, host_bundle, tmp_path)
    keyed = warm.with_env(WARM_TRUSTED_KEYS=str(pub))
    key = pub.with_suffix("")
    said = _one_line(keyed("merge", *urls, "-o", tmp_path / "keyed.warm", "--key", key))
    assert said.startswith(f"warm: error: {urls[0]}: not signed by a trusted key"), said
    assert not (tmp_path / "keyed.warm").exists()
