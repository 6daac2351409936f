"""A blob whose entry lies about its size: only one a kernel uses makes an entry
unservable (`warm diff` exits 1); one no kernel uses is named by `warm verify`'s
integrity check and leaves diff's answer alone. Real files, the real CLI."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)


def _plant(path: Path, data: bytes, size: int, *, used: bool) -> str:
    """A blob of `data` whose entry says `size` (the blob of a kernel, if `used`)."""
    sha = hashlib.sha256(data).hexdigest()
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO blobs VALUES (?, ?, ?)", (sha, size, data))
        if used:
            conn.execute("UPDATE kernels SET sha256 = ? WHERE rowid = 1", (sha,))
    return sha


def test_only_a_lying_blob_a_kernel_uses_makes_diff_say_cannot_serve(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    base = host_bundle(tmp_path / "a.warm")  # as `warm run examples/matmul_host.py` makes it
    unused = tmp_path / "unused.warm"
    unused.write_bytes(base.read_bytes())
    sha = _plant(unused, b"x", 5, used=False)

    diffed = warm("diff", base, unused)
    assert diffed.returncode == 0, diffed.stdout + diffed.stderr
    assert "cannot serve" not in diffed.stdout
    verified = warm("verify", unused)
    assert verified.returncode == 1
    assert f"blob {sha[:16]} is 1 bytes, its entry says 5" in verified.stdout
    assert "no kernel uses it" in verified.stdout

    used = tmp_path / "used.warm"
    used.write_bytes(base.read_bytes())
    sha = _plant(used, b"y", 5, used=True)
    diffed = warm("diff", base, used)
    assert diffed.returncode == 1
    assert "cannot serve" in diffed.stdout and f"blob {sha[:16]} is 1 bytes" in diffed.stdout


def test_one_scan_names_the_lies_a_kernel_uses_first(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """`blob_problems(unused=True)` (one verify's) reads the blobs' sizes in one query and
    names the lies a kernel uses before those none does; without `unused`, only the first."""
    from warmcli import Bundle

    path = host_bundle(tmp_path / "b.warm")  # as `warm run examples/matmul_host.py` makes it
    spare = _plant(path, b"x", 5, used=False)
    served = _plant(path, b"y", 7, used=True)
    with Bundle.open(path) as bundle:
        sizes: list[str] = []
        bundle._conn.set_trace_callback(
            lambda sql: sizes.append(sql) if "size != length(data)" in sql else None
        )
        every = list(bundle.blob_problems(unused=True))
        used_only = list(bundle.blob_problems())
    assert len(sizes) == 2  # one query per call, not one per kind of blob
    lies = [p for p in every if p.startswith("blob ")]
    assert lies == [
        f"blob {served[:16]} is 1 bytes, its entry says 7",
        f"blob {spare[:16]} is 1 bytes, its entry says 5 (no kernel uses it)",
    ]
    assert [p for p in used_only if p.startswith("blob ")] == lies[:1]
