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

import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's, commands forked)
from full_disk import in_private_mount
from local_http import served_locally
from test_fleet61 import jobs  # noqa: F401  (fixture)
from test_fleet62 import _stale_record, _store
from test_remote import Store, _etag, _handler, http_store, s3  # noqa: F401  (fixtures)

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


class _Stalling(Store):
    """A store whose GET, once `stall` is set, sends its headers and half the body, then
    waits (`release`)."""

    def __init__(self) -> None:
        super().__init__()
        self.stall, self.sending, self.release = False, threading.Event(), threading.Event()


@pytest.fixture
def stalling_store() -> Iterator[tuple[_Stalling, str]]:
    store = _Stalling()
    base = _handler(store)

    class Handler(base):  # type: ignore[misc,valid-type]
        def do_GET(self) -> None:
            if not store.stall:
                super().do_GET()
                return
            body = store.files[self.path]
            self.send_response(200)
            self.send_header("ETag", _etag(body))
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[: len(body) // 2])
            self.wfile.flush()
            store.sending.set()
            store.release.wait(60)

    with served_locally(Handler) as base:
        yield store, base
        store.release.set()


def test_ctrl_c_while_the_store_is_read_loses_nothing_and_leaves_no_folder(
    warm: Warm,
    tmp_path: Path,
    stalling_store: tuple[_Stalling, str],
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
) -> None:
    """A Ctrl-C while the fast-forward downloads what the store holds: exit 130, one line,
    nothing sent, the store's object as it was, no temporary folder left."""
    store, base = stalling_store
    url = f"{base}/fleet.warm"
    store.files["/fleet.warm"] = jobs[0]
    out = _stale_record(warm, tmp_path, url, jobs)
    tmp, store.stall = tmp_path / "tmp", True
    tmp.mkdir()
    proc = warm.with_env(TMPDIR=str(tmp)).popen("push", out, url)
    try:
        assert store.sending.wait(60)
        time.sleep(0.5)  # (the body's first half read: the download under way)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert store.files["/fleet.warm"] == jobs[0] and store.puts == []
    assert list(tmp.iterdir()) == []


def test_a_full_temporary_folder_is_one_line_and_nothing_lost(
    warm: Warm,
    tmp_path: Path,
    http_store: Served,  # noqa: F811
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
) -> None:
    """TMPDIR a tmpfs with room for the push's copy of its bundle, not for what the store
    holds as well: exit 2, one line naming the temporary folder and what to do (set
    TMPDIR: not the store's remedies, merge or --force), nothing sent, nothing left there."""
    store, base, _ = http_store
    url = f"{base}/fleet.warm"
    store.files["/fleet.warm"] = jobs[0]
    out = _stale_record(warm, tmp_path, url, jobs)
    room = out.stat().st_size + len(jobs[0]) // 2
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    script = (
        f"mount -t tmpfs -o size={room} tmpfs {tmp} || exit 99; "
        f"{sys.executable} -m warmcli push {out} {url}; echo rc=$?; ls -A {tmp}"
    )
    proc = in_private_mount(script, dict(warm.env, TMPDIR=str(tmp)))
    assert proc.stdout.strip() == "rc=2", proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(tmp) in proc.stderr and "not pushed" in proc.stderr, proc.stderr
    # Before: "... changed since x.warm was merged from it ... and was not read (its local
    # copy cannot be kept in ...): ... merge again ..., or push --force": no word of room.
    assert "No space left on device" in proc.stderr, proc.stderr
    assert "set TMPDIR to a folder with room" in proc.stderr, proc.stderr
    assert "--force" not in proc.stderr, proc.stderr
    assert store.files["/fleet.warm"] == jobs[0] and store.puts == []


def test_a_toolchain_installed_elsewhere_is_no_fingerprint_lost(
    warm: Warm,
    tmp_path: Path,
    http_store: Served,  # noqa: F811
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
) -> None:
    """A fingerprint is held by its identity: a toolchain's names the compiler and version,
    not where it is installed (a run on a machine with it elsewhere writes its own path),
    so a store naming the same toolchain at another path is no refusal."""
    store, base, _ = http_store
    url = f"{base}/fleet.warm"
    store.files["/fleet.warm"] = jobs[0]
    out = _stale_record(warm, tmp_path, url, jobs)
    elsewhere = (
        'UPDATE fingerprints SET data = replace(data, \'"path": "\', \'"path": "/opt\') '
        "WHERE kind = 'toolchain'"
    )
    store.files["/fleet.warm"] = _changed(jobs[0], tmp_path, elsewhere)
    proc = warm("push", out, url)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert store.files["/fleet.warm"] == out.read_bytes()


@pytest.fixture
def mirrored_store() -> Iterator[tuple[Store, str]]:
    """A store whose GET and HEAD of /fleet.warm redirect to /mirror.warm (a stale copy, say,
    a cache in front of it), once `files["/redirect"]` is set; its PUT takes /fleet.warm."""
    store = Store()
    base = _handler(store)

    class Handler(base):  # type: ignore[misc,valid-type]
        def _redirected(self) -> bool:
            if self.path != "/fleet.warm" or "/redirect" not in store.files:
                return False
            self.send_response(302)
            self.send_header("Location", "/mirror.warm")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return True

        def do_GET(self) -> None:
            if not self._redirected():
                super().do_GET()

        def do_HEAD(self) -> None:
            if not self._redirected():
                super().do_HEAD()

    with served_locally(Handler) as base:
        yield store, base


def test_a_redirect_to_a_copy_the_push_holds_all_of_loses_nothing(
    warm: Warm,
    tmp_path: Path,
    mirrored_store: tuple[Store, str],
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
) -> None:
    """The store's reads redirected to a copy all of which the push holds, while the URL
    holds another job's push: what was compared is not what the PUT would replace, and its
    `If-Match` (the ETag read) refuses it: nothing lost."""
    store, base = mirrored_store
    url = f"{base}/fleet.warm"
    store.files["/fleet.warm"] = jobs[0]
    out = _stale_record(warm, tmp_path, url, jobs)
    store.files.update({"/fleet.warm": jobs[2], "/mirror.warm": jobs[0], "/redirect": b""})
    proc = warm("push", out, url)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert store.files["/fleet.warm"] == jobs[2] and store.puts == []


def test_an_s3_store_signed_since_is_not_replaced_by_an_unsigned_push(
    request: pytest.FixtureRequest,
    warm: Warm,
    tmp_path: Path,
    jobs: tuple[bytes, bytes, bytes],  # noqa: F811
) -> None:
    """As `test_a_store_signed_since_is_not_replaced_by_an_unsigned_push`, on `s3://`
    (moto): the object signed since, all of whose kernels and tunes the push holds, is
    kept. Before: pushed over it, exit 0."""
    url, put = _store("s3", request, warm, tmp_path)
    put(jobs[0])
    out = _stale_record(warm, tmp_path, url, jobs)
    signed = tmp_path / "signed.warm"
    signed.write_bytes(jobs[0])
    assert warm("keygen", tmp_path / "k").returncode == 0
    assert warm("sign", signed, "--key", tmp_path / "k").returncode == 0
    put(signed.read_bytes())
    proc = warm("push", out, url)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert " and holds 1 signature that " in proc.stderr, proc.stderr
    pulled = tmp_path / "pulled.warm"
    assert warm("pull", url, pulled).returncode == 0
    assert pulled.read_bytes() == signed.read_bytes()  # the signed object, whole
