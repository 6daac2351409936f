"""An attacker's review of the newest code (blobs read in chunks, the kernel row's fast
path, the JSON stream, the narrow listing, the fd redirection under --json): each
confirmed bug's failing case, kept as the test of its fix. Hostile bundles are
hand-crafted copies of a real one with python's sqlite3."""

from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from warmcli.bundle.blobs import CHUNK_BYTES, streamed
from warmcli.bundle.store import Bundle
from warmcli.errors import BundleError


def _first_kernel(path: Path) -> tuple[str, str]:
    with sqlite3.connect(path) as conn:
        key, sha = conn.execute("SELECT key, sha256 FROM kernels LIMIT 1").fetchone()
    conn.close()
    return key, sha


@pytest.mark.parametrize("grown", [True, False])
def test_a_blob_changed_between_its_size_read_and_its_copy_is_refused_never_a_traceback(
    made: tuple[object, Path], tmp_path: Path, grown: bool
) -> None:
    """`warm merge` reads a blob's size, then copies it a chunk at a time: another process
    that rewrites the blob in between (longer than the size read, or shorter) makes the
    copy refused as a blob not matching its sha256, and the merge's output holds nothing."""
    _, good = made
    source = tmp_path / "source.warm"
    shutil.copyfile(good, source)
    key, sha = _first_kernel(source)
    with Bundle.open(source) as reader, Bundle.create(tmp_path / "out.warm") as dest:
        binary = streamed(reader, sha)
        record = reader.kernel(key)
        assert record is not None
        conn = sqlite3.connect(source)  # another process, between the size read and the copy
        with conn:
            data = os.urandom(3 * CHUNK_BYTES) if grown else b"\x7fELF"
            conn.execute("UPDATE blobs SET data = ? WHERE sha256 = ?", (data, sha))
        conn.close()
        with pytest.raises(BundleError, match="does not match its sha256"):
            dest.put(kernels=[(record, binary)])
        assert dest.kernels() == [] and dest._one("SELECT count(*) FROM blobs", ()) == (0,)
