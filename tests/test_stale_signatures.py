"""A signature made before a migration (stale): it vouches for nothing, which matters
only under trusted keys. Push and pull take such a bundle (it is sound); `warm verify`
says the signature is stale in its own line; `warm run` under trusted keys judges trust
before it migrates. Real files, the real CLI in subprocesses, a real HTTP server."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from conftest import Warm
from test_remote import Store, http_store  # noqa: F401 - the fixture
from test_signed_migration import _signed_format2

from warmcli.bundle.file import FORMAT_VERSION


def _stale(tmp_path: Path, warm: Warm) -> tuple[Path, Path]:
    """A format-2 bundle signed as warm 2 signed it, migrated since (a write open)."""
    path, key = _signed_format2(tmp_path, warm)
    assert warm("clean", path).returncode == 0
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == FORMAT_VERSION
    return path, key


def test_push_and_pull_take_a_sound_bundle_with_a_stale_signature(
    http_store: tuple[Store, str, object],  # noqa: F811
    warm: Warm,
    tmp_path: Path,
) -> None:
    store, base, _ = http_store
    path, _ = _stale(tmp_path, warm)
    store.files["/there.warm"] = path.read_bytes()
    pulled = warm("stats", f"{base}/there.warm")
    assert pulled.returncode == 0, pulled.stderr
    assert "refused" not in pulled.stdout + pulled.stderr
    pushed = warm("push", path, f"{base}/pushed.warm")
    assert pushed.returncode == 0, pushed.stderr
    assert store.files["/pushed.warm"] == path.read_bytes()
