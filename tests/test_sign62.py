"""A signed fleet's pull, run, push (stop 62): the store's signature is held by the push's
signature by the same key where that lists every row the store's did, against the real CLI
and the 127.0.0.1 HTTP test store (`test_remote`'s).

`warm merge URL a.warm -o m.warm --key K`, `warm push m.warm URL`, then elsewhere `warm pull
URL x.warm`, `warm run w.py -b x.warm --key K` (more kernels, signed again by K), `warm push
x.warm URL`: refused as "changed since merged" and losing 1 signature, though nobody pushed
since, because the push's fast-forward (`warmcli.bundle.fast_forward`) held a store signature
only as the very same row, and the run's signature by K (over the rows it added too) is
another row. Now a signature by the same key id and public key that verifies and lists every
row the store's did holds it; another key's, one listing fewer rows, or one that does not
verify does not.
"""

from __future__ import annotations

import sqlite3
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's, commands forked)
from test_fleet61 import _held, jobs  # noqa: F401  (fixture)
from test_remote import Store, http_store  # noqa: F401  (fixtures)

Served = tuple[Store, str, ThreadingHTTPServer]


def _keys(warm: Warm, tmp_path: Path) -> tuple[Path, Path]:
    """Two key files, K and another."""
    keys = tmp_path / "k", tmp_path / "other"
    for key in keys:
        assert warm("keygen", key).returncode == 0
    return keys


def _pushed_then_pulled(
    warm: Warm,
    tmp_path: Path,
    url: str,
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
    key: Path | None,
) -> tuple[Warm, Path]:
    """Job A merges the store with its bundle (signing with `key`, if given) and pushes;
    machine X pulls the result: X's warm and its copy."""
    (tmp_path / "a.warm").write_bytes(jobs[1])
    job_a = warm.with_env(WARM_HOME=str(tmp_path / "home-a"))
    signing = ("--key", key) if key else ()
    merged = tmp_path / "m.warm"
    proc = job_a("merge", url, tmp_path / "a.warm", "-o", merged, *signing)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = job_a("push", merged, url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    x = warm.with_env(WARM_HOME=str(tmp_path / "home-x"), WARM_EXAMPLE_KERNELS="7")
    copy = tmp_path / "x.warm"
    assert x("pull", url, copy).returncode == 0
    return x, copy


def _fleet(
    warm: Warm, tmp_path: Path, served: Served, held: tuple[bytes, bytes, bytes], signed: bool
) -> tuple[Store, str, tuple[Path, Path], Warm, Path]:
    """The store holding held[0] (`jobs`), two keys (K, another), and X's copy pulled after a merge
    (signed by K where `signed`) was pushed: the store, its URL, the keys, X, X's copy."""
    store, base, _ = served
    url = f"{base}/fleet.warm"
    store.files["/fleet.warm"] = held[0]
    keys = _keys(warm, tmp_path)
    x, copy = _pushed_then_pulled(warm, tmp_path, url, held, keys[0] if signed else None)
    return store, url, keys, x, copy


def _run(x: Warm, copy: Path, key: Path) -> None:
    """X's run of the many-kernels example with 7 kernels (2 more), signed with `key`."""
    before = _held(x, copy)[0]
    proc = x("run", EXAMPLES / "many_kernels_host.py", "-b", copy, "-q", "--key", key)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(_held(x, copy)[0]) > len(before)  # the run added kernels


def _accepted(warm: Warm, x: Warm, copy: Path, url: str, store: Store, tmp_path: Path) -> None:
    """`warm push copy url` goes on, exit 0: the store holds X's copy, whole."""
    puts = len(store.puts)
    proc = x("push", copy, url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pushed" in proc.stdout and proc.stderr == "", proc.stdout + proc.stderr
    assert len(store.puts) == puts + 1
    pulled = tmp_path / "pulled.warm"
    assert warm("pull", url, pulled).returncode == 0
    assert pulled.read_bytes() == copy.read_bytes()


def _refused(x: Warm, copy: Path, url: str, store: Store) -> str:
    """`warm push copy url` refused as losing one signature, one line, exit 2, nothing
    sent: its stderr."""
    held, puts = store.files["/fleet.warm"], len(store.puts)
    proc = x("push", copy, url)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{url} changed since {copy} was merged from it" in proc.stderr, proc.stderr
    assert f" and holds 1 signature that {copy} does not " in proc.stderr, proc.stderr
    assert store.files["/fleet.warm"] == held and len(store.puts) == puts  # nothing lost
    return proc.stderr


def test_signed_pull_run_push_is_accepted_when_nobody_pushed_since(
    warm: Warm,
    tmp_path: Path,
    http_store: Served,  # noqa: F811
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
) -> None:
    """The README's signed fleet: merge --key K, push; pull, run --key K, push. Before:
    exit 2, `... and holds 1 signature that x.warm does not`, nobody having pushed since
    (the run's signature by K, over every row the store's listed and its own, is another
    row than the store's)."""
    store, url, (key, _), x, copy = _fleet(warm, tmp_path, http_store, jobs, signed=True)
    _run(x, copy, key)
    _accepted(warm, x, copy, url, store, tmp_path)
    proc = warm("verify", tmp_path / "pulled.warm")
    assert proc.returncode == 0 and "INVALID" not in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("by", ["same", "other"])
def test_a_store_signed_since_is_held_only_by_a_signature_of_its_key(
    warm: Warm,
    tmp_path: Path,
    http_store: Served,  # noqa: F811
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
    by: str,
) -> None:
    """Job A pushes its merge unsigned; X pulls; the store's bundle is then signed by K
    (`warm sign`, nothing else changed). X's run signed by K covers all the store's
    signature listed: accepted (before: refused, 1 signature). Signed by another key:
    refused, the store's signature by K would be lost."""
    store, url, (key, other), x, copy = _fleet(warm, tmp_path, http_store, jobs, signed=False)
    signed = tmp_path / "signed.warm"
    signed.write_bytes(store.files["/fleet.warm"])
    assert warm("sign", signed, "--key", key).returncode == 0
    store.files["/fleet.warm"] = signed.read_bytes()
    _run(x, copy, key if by == "same" else other)
    if by == "same":
        _accepted(warm, x, copy, url, store, tmp_path)
    else:
        _refused(x, copy, url, store)


def test_a_store_signed_by_the_key_over_a_row_the_push_lacks_is_refused(
    warm: Warm,
    tmp_path: Path,
    http_store: Served,  # noqa: F811
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
) -> None:
    """After X pulled, job B merges the store with what it already holds, signed by K, and
    pushes: the store's signature by K lists B's merge record (a manifest row) that X's
    signature by K does not, though X holds every kernel and tune of it: refused."""
    store, url, (key, _), x, copy = _fleet(warm, tmp_path, http_store, jobs, signed=True)
    (tmp_path / "b.warm").write_bytes(jobs[0])  # (all of which the store holds)
    job_b = warm.with_env(WARM_HOME=str(tmp_path / "home-b"))
    b_next = tmp_path / "b-next.warm"
    proc = job_b("merge", url, tmp_path / "b.warm", "-o", b_next, "--key", key)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert job_b("push", b_next, url).returncode == 0
    _run(x, copy, key)
    _refused(x, copy, url, store)


def test_a_pushed_signature_that_does_not_verify_holds_nothing(
    warm: Warm,
    tmp_path: Path,
    http_store: Served,  # noqa: F811
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
) -> None:
    """The signed pull-run-push, X's signature by K then corrupted (one byte of it
    flipped): it lists every row the store's did, but does not verify. The push refuses it
    as it refuses any bundle with an invalid signature, before it reads the store (one
    line, exit 2, nothing sent); and the comparison itself (`lost`, on the very files)
    holds the store's signature by the good copy's, never by the corrupt one's."""
    from warmcli.bundle.fast_forward import lost

    store, url, (key, _), x, copy = _fleet(warm, tmp_path, http_store, jobs, signed=True)
    _run(x, copy, key)
    good = tmp_path / "good.warm"
    good.write_bytes(copy.read_bytes())
    with sqlite3.connect(copy) as conn:
        (old,) = conn.execute("SELECT signature FROM signatures").fetchone()
        flipped = bytes([old[0] ^ 1]) + old[1:]
        assert conn.execute("UPDATE signatures SET signature = ?", (flipped,)).rowcount == 1
    conn.close()
    held, puts, downloads = store.files["/fleet.warm"], len(store.puts), store.downloads
    proc = x("push", copy, url)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{copy}: not pushed: signature by key " in proc.stderr, proc.stderr
    assert " is invalid" in proc.stderr, proc.stderr
    assert store.files["/fleet.warm"] == held and len(store.puts) == puts
    assert store.downloads == downloads
    stored = tmp_path / "stored.warm"
    stored.write_bytes(held)
    assert lost(stored, good) == (0, 0, 0, 0)
    assert lost(stored, copy) == (0, 0, 0, 1)  # (a signature that does not verify)
