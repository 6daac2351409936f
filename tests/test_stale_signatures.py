"""A signature made before a migration (stale): it vouches for nothing, which matters
only under trusted keys. Push and pull take such a bundle (it is sound); `warm verify`
says the signature is stale in its own line; `warm run` under trusted keys judges trust
before it migrates. Real files, the real CLI in subprocesses, a real HTTP server."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from conftest import EXAMPLES, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
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


def _trusting(warm: Warm, key: Path) -> Warm:
    return warm.with_env(WARM_TRUSTED_KEYS=f"{key}.pub")


def test_a_run_under_trusted_keys_never_migrates_a_bundle_it_refuses(
    warm: Warm, tmp_path: Path
) -> None:
    path, key = _signed_format2(tmp_path, warm)
    before = path.read_bytes()
    trusting = _trusting(warm, key)
    # Covered by the trusted key as it is, but the run cannot sign it again: a migration
    # would leave the signature stale, so it is refused before it and left as it was.
    ran = trusting("run", EXAMPLES / "matmul_host.py", "-b", path, "-q")
    assert ran.returncode == 2 and "Traceback" not in ran.stderr, ran.stderr
    assert len(ran.stderr.strip().splitlines()) == 1 and "--key" in ran.stderr
    assert path.read_bytes() == before
    assert trusting("verify", path).returncode == 0  # still served as it is
    # Signed by a key the run does not trust: refused as it is, never migrated.
    other = tmp_path / "other"
    assert warm("keygen", other).returncode == 0
    untrusting = _trusting(warm, other)
    ran = untrusting("run", EXAMPLES / "matmul_host.py", "-b", path, "-q", "--key", other)
    assert ran.returncode == 2 and "untrusted" in ran.stderr, ran.stderr
    assert path.read_bytes() == before


def test_a_run_with_the_signing_key_migrates_a_trusted_bundle_and_signs_it_again(
    warm: Warm, tmp_path: Path
) -> None:
    path, key = _signed_format2(tmp_path, warm)
    trusting = _trusting(warm, key)
    ran = trusting("run", EXAMPLES / "matmul_host.py", "-b", path, "-q", "--key", key)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == FORMAT_VERSION
    verified = trusting("verify", path)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "no longer covers" not in verified.stdout + verified.stderr


def test_verify_marks_a_stale_signature_in_its_line_and_its_counts_agree(
    warm: Warm, tmp_path: Path
) -> None:
    import re

    path, _ = _stale(tmp_path, warm)
    said = warm("verify", path).stdout
    status = [ln for ln in said.splitlines() if ln.startswith("signature: key")]
    assert len(status) == 1 and "stale" in status[0], said
    vouches = re.search(r"vouches for none of (\d+) row", status[0])
    uncovered = re.search(r"(\d+) row\(s\) no valid signature covers", said)
    assert vouches and uncovered and vouches[1] == uncovered[1], said
