"""Review of stop 62's `warm push` fast-forward (`warmcli.bundle.fast_forward`): what the
store holds that the push would lose, beyond a kernel's blob and a tune's record, against
the real CLI and the 127.0.0.1 HTTP test store (`test_remote`'s).

The fast-forward compared kernels by key and blob and tunes by record, and nothing else: a
store bundle signed since (its `signatures` rows), holding a fingerprint the push lacks, or
a kernel under the same key and blob with other metadata (its device, label, compile log:
what a signature covers and a production process serves) was replaced by a push that held
none of it, exit 0: a signed store's signature gone, so processes trusting only signed
entries served nothing of it.
"""

from __future__ import annotations

import sqlite3
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's, commands forked)
from test_fleet61 import jobs  # noqa: F401  (fixture)
from test_fleet62 import _stale_record
from test_remote import Store, http_store  # noqa: F401  (fixtures)

Served = tuple[Store, str, ThreadingHTTPServer]


def _changed(data: bytes, tmp_path: Path, *sql: str) -> bytes:
    """`data`, a bundle, with `sql` run on it."""
    path = tmp_path / "changed.warm"
    path.write_bytes(data)
    with sqlite3.connect(path) as conn:
        for statement in sql:
            assert conn.execute(statement).rowcount != 0, statement
    conn.close()
    return path.read_bytes()


def _refused(warm: Warm, out: Path, url: str, store: Store, held: bytes) -> str:
    """`warm push out url` refused, the store's object `held` as it was: its stderr."""
    proc = warm("push", out, url)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{url} changed since {out} was merged from it" in proc.stderr, proc.stderr
    assert store.files["/fleet.warm"] == held and store.puts == []  # nothing lost
    return proc.stderr


def test_a_store_signed_since_is_not_replaced_by_an_unsigned_push(
    warm: Warm,
    tmp_path: Path,
    http_store: Served,  # noqa: F811
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
) -> None:
    """The store's bundle, all of whose kernels and tunes the push holds, was signed since
    the push's bundle was merged from it: the push would lose the signature (a production
    process trusting only the key would serve none of it). Before: pushed, exit 0."""
    store, base, _ = http_store
    url = f"{base}/fleet.warm"
    store.files["/fleet.warm"] = jobs[0]
    out = _stale_record(warm, tmp_path, url, jobs)
    signed = tmp_path / "signed.warm"
    signed.write_bytes(jobs[0])
    assert warm("keygen", tmp_path / "k").returncode == 0
    assert warm("sign", signed, "--key", tmp_path / "k").returncode == 0
    store.files["/fleet.warm"] = held = signed.read_bytes()
    said = _refused(warm, out, url, store, held)
    assert "1 signature" in said, said


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE kernels SET label = label || '-other' WHERE rowid = 1",
        "UPDATE kernels SET device = device || '-other' WHERE rowid = 1",
        "UPDATE kernels SET compile_log = 'warning: other build' WHERE rowid = 1",
    ],
    ids=["label", "device", "compile_log"],
)
def test_a_kernel_the_store_holds_with_other_metadata_is_not_replaced(
    warm: Warm,
    tmp_path: Path,
    http_store: Served,  # noqa: F811
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
    sql: str,
) -> None:
    """A kernel under the same key and blob, but another row (another build's): the
    push would replace the store's row with its own. Before: pushed, exit 0."""
    store, base, _ = http_store
    url = f"{base}/fleet.warm"
    store.files["/fleet.warm"] = jobs[0]
    out = _stale_record(warm, tmp_path, url, jobs)
    store.files["/fleet.warm"] = held = _changed(jobs[0], tmp_path, sql)
    said = _refused(warm, out, url, store, held)
    assert " and holds 1 kernel that " in said, said


def test_a_fingerprint_the_push_lacks_is_not_replaced(
    warm: Warm,
    tmp_path: Path,
    http_store: Served,  # noqa: F811
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
) -> None:
    """The store names a device the push's bundle does not (its fingerprint): lost by
    the push. Before: pushed, exit 0."""
    store, base, _ = http_store
    url = f"{base}/fleet.warm"
    store.files["/fleet.warm"] = jobs[0]
    out = _stale_record(warm, tmp_path, url, jobs)
    add = (
        "INSERT INTO fingerprints SELECT identity || '-b', kind, data FROM fingerprints "
        "WHERE rowid = (SELECT min(rowid) FROM fingerprints)"
    )
    store.files["/fleet.warm"] = held = _changed(jobs[0], tmp_path, add)
    said = _refused(warm, out, url, store, held)
    assert "1 fingerprint" in said, said
