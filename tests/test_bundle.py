"""The SQLite bundle: schema, foreign and corrupt files, blobs checked before they are served."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from warmcli import Kernel, ProcessMode, ProcessModeOverride, Runtime
from warmcli.backends.host import HostDevice
from warmcli.bundle.file import FORMAT_VERSION
from warmcli.bundle.store import Bundle, BundleError

K = Kernel("void inc(float *x) { x[0] += 1.0f; }", "inc", "P")


def make_bundle(path: Path) -> None:
    rt = Runtime(HostDevice())
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE):
        rt.launch(K, rt.buffer(1))
    with Bundle.open(path, write=True) as bundle:
        rt.persist(bundle)
    rt.close()


def test_new_bundle_has_manifest_and_is_not_in_wal(tmp_path: Path) -> None:
    path = tmp_path / "b.warm"
    make_bundle(path)
    with Bundle.open(path) as bundle:
        m = bundle.manifest()
        assert m["format_version"] == str(FORMAT_VERSION)
        assert float(m["updated"]) >= float(m["created"])
        assert bundle.counts() == {"kernels": 1, "blobs": 1, "tunes": 0}
        kinds = {f["kind"] for f in bundle.fingerprints()}
        assert kinds == {"device", "toolchain"}
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    conn.close()


def test_read_only_copy_opens(tmp_path: Path) -> None:
    path = tmp_path / "b.warm"
    make_bundle(path)
    ro = tmp_path / "ro"
    ro.mkdir()
    copy = ro / "b.warm"
    copy.write_bytes(path.read_bytes())
    copy.chmod(0o444)
    ro.chmod(0o555)
    try:
        with Bundle.open(copy) as bundle:
            assert len(bundle.kernels()) == 1
    finally:
        ro.chmod(0o755)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "an empty file"),
        (b"hello, this is not a database at all" * 10, "not an SQLite file"),
    ],
)
def test_garbage_is_refused(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "b.warm"
    path.write_bytes(content)
    with pytest.raises(BundleError, match=message):
        Bundle.open(path)


def test_foreign_sqlite_and_other_version_are_refused(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(BundleError, match="another application"):
        Bundle.open(foreign)
    path = tmp_path / "b.warm"
    make_bundle(path)
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {FORMAT_VERSION + 1}")
    conn.commit()
    conn.close()
    with pytest.raises(BundleError, match="format version"):
        Bundle.open(path)


def test_truncated_bundle_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.warm"
    make_bundle(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(BundleError):
        with Bundle.open(path) as bundle:
            bundle.kernels()


def test_blob_with_wrong_sha256_is_not_served_and_is_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "b.warm"
    make_bundle(path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE blobs SET data = zeroblob(100)")
    conn.commit()
    conn.close()
    with Bundle.open(path) as bundle:
        [record] = bundle.kernels()
        with pytest.raises(BundleError, match="does not match"):
            bundle.blob(record.sha256)
        rt = Runtime(HostDevice(), bundle)
        with ProcessModeOverride(ProcessMode.EXECUTE) as collector:
            buf = rt.upload(np.zeros(1, dtype=np.float32))
            rt.launch(K, buf)
            assert rt.read(buf).tolist() == [1.0]
        c = collector.reader().compilation
        assert (c.loaded, c.compiled) == (0, 1)
        assert any("does not match" in n for n in collector.reader().notes())
        rt.close()


def test_read_only_bundle_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "b.warm"
    make_bundle(path)
    with Bundle.open(path) as bundle, pytest.raises(BundleError, match="read-only"):
        bundle.put()


def test_a_bundle_opened_on_one_thread_serves_every_thread(tmp_path: Path) -> None:
    """Production opens the bundle once (`use_bundle`) and may launch from worker threads."""
    import threading

    path = tmp_path / "b.warm"
    make_bundle(path)
    errors: list[BaseException] = []
    with Bundle.open(path) as bundle:
        rt = Runtime(HostDevice(), bundle)

        def serve() -> None:
            try:
                for _ in range(20):
                    assert len(bundle.kernels()) == 1
                worker = Runtime(HostDevice(), bundle)
                buf = worker.upload(np.zeros(1, dtype=np.float32))
                worker.launch(K, buf)
                assert worker.read(buf).tolist() == [1.0]
                worker.close()
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=serve) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        rt.close()
    assert errors == []


@pytest.mark.parametrize(
    "name",
    ["sp ace?#%;&=.warm", "ünïcode.warm", b"bad\xff.warm".decode(errors="surrogateescape")],
)
def test_any_file_name_opens_read_only(tmp_path: Path, name: str) -> None:
    """The read-only open goes through a `file:` URI: odd characters, names that are not
    UTF-8 and a path that starts with `//` must all still name the file."""
    path = tmp_path / "b.warm"
    make_bundle(path)
    odd = tmp_path / name
    odd.write_bytes(path.read_bytes())
    with Bundle.open(odd) as bundle:
        assert bundle.counts()["kernels"] == 1
    with Bundle.open("/" + str(odd)) as bundle:  # `//tmp/...`: still a path, no authority
        assert bundle.counts()["kernels"] == 1
