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
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_hostile_review import (
    crafted,
    producing_server,  # noqa: F401  (its fixture `producing`)
    serve,
)

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


def test_a_row_sqlite_cannot_decode_is_one_miss_never_its_neighbours(
    made: tuple[object, Path], tmp_path: Path, producing: object
) -> None:
    """A kernel row whose label is no UTF-8 makes SQLite refuse to hand it back: a serving
    process's prefetch of the device's rows passes over it (and goes on after it),
    so that kernel alone is a miss, explained as corrupt; every other kernel is served. Read
    by its key, the row is a `BundleError`; `warm check`, `stats` say it in a line naming
    it, `warm verify` names it among its problems (`test_clean37`)."""
    warm, good = made
    path = crafted(
        good,
        tmp_path / "undecodable.warm",
        "UPDATE kernels SET label = CAST(x'eda080' AS TEXT) WHERE entry = 'bias_relu'",
    )
    proc = serve(producing, warm, path)  # type: ignore[arg-type]
    assert proc.returncode == 0, proc.stderr
    assert "lacked 1 kernel(s)" in proc.stdout and "kernel bias_relu" in proc.stdout, proc.stdout
    explained = serve(producing, warm, path, WARM_EXPLAIN="1")  # type: ignore[arg-type]
    assert explained.returncode == 0 and "Traceback" not in explained.stderr, explained.stderr
    assert "kernel bias_relu: corrupt" in explained.stderr, explained.stderr
    with sqlite3.connect(path) as conn:
        bad, backend, arch = conn.execute(
            "SELECT key, backend, arch FROM kernels WHERE entry = 'bias_relu'"
        ).fetchone()
        keys = [k for (k,) in conn.execute("SELECT key FROM kernels ORDER BY rowid")]
    conn.close()
    with Bundle.open(path) as bundle:  # the row read by its key is a clean BundleError
        fetched = bundle.kernel_rows(backend, arch)
        before = keys[keys.index(bad) - 1 : keys.index(bad)]  # stepped with it, maybe
        assert bad not in fetched and set(keys) - set(fetched) - {bad} <= set(before)  # went on
        assert all(bundle.kernel(k, fetched) for k in keys if k != bad)
        with pytest.raises(BundleError, match=r"corrupt bundle.*decode"):
            bundle.kernel(bad, fetched)
    named = f"corrupt kernel entry '{bad[:16]}' (label: not UTF-8)"
    for command in ("check", "stats"):  # one line each naming the entry, never a traceback
        for args in ((command, path), (command, "--json", path)):
            proc = warm(*args)  # type: ignore[operator]
            lines = proc.stderr.splitlines()
            assert proc.returncode == 2 and len(lines) == 1, (args, proc.stdout + proc.stderr)
            assert named in lines[0], (args, lines)
    for args in (("verify", path), ("verify", "--json", path)):  # named among its problems
        proc = warm(*args)  # type: ignore[operator]
        assert proc.returncode == 1 and named in proc.stdout, (args, proc.stdout + proc.stderr)
