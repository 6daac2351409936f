"""A signed bundle migrated since it was signed: its format version is part of what a
signature vouches for, so `warm verify` under WARM_TRUSTED_KEYS says in one line that
the signature no longer covers it (non-zero exit) and a production process under
WARM_TRUSTED_KEYS refuses it, until the bundle is signed again. Real files, the real
CLI, real processes: each `warm` command and production process a fork of one that imported
the CLI, or numpy and warmcli, once (`tests/forked_cli.py`, `tests/forked_python.py`): what
they say is the point, not how they start."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, Warm
from forked_python import ForkedPython
from test_format3 import _format2, _tune, sign_as_format2

from warmcli.bundle.file import FORMAT_VERSION
from warmcli.bundle.signing import _raw_public, load_private_key

SERVE = """from warmcli import production
from warmcli.bundle.store import Bundle
b = production.bundle()
print(len(Bundle.tune_keys(b)))  # (what it serves from is a `BundleCore`: no admin of its own)
"""


def _signed_format2(base: Path, warm: Warm) -> tuple[Path, Path]:
    """A format-2 bundle signed as warm 2 signed it (by a key `warm keygen` made)."""
    path, key = base / "two.warm", base / "key"
    _format2(path, [_tune(0), _tune(1)])
    with sqlite3.connect(path) as conn:  # the whole manifest, as warm writes it
        conn.executemany(
            "INSERT INTO manifest VALUES (?, ?)",
            [("warm_version", "2.0"), ("created", "1.0"), ("updated", "1.0")],
        )
    assert warm("keygen", key).returncode == 0
    private = load_private_key(key)
    sign_as_format2(path, private, _raw_public(private.public_key()))
    return path, key


def _verify(warm: Any, path: Path, pub: Path) -> subprocess.CompletedProcess[str]:
    return warm.with_env(WARM_TRUSTED_KEYS=str(pub))("verify", path)  # type: ignore[no-any-return]


def _serve(
    python: ForkedPython, warm: Any, path: Path, pub: Path
) -> subprocess.CompletedProcess[str]:
    env = dict(warm.env, WARM_BUNDLE=str(path), WARM_TRUSTED_KEYS=str(pub))
    return python.run(SERVE, env=env, cwd=ROOT)


@pytest.fixture
def python() -> Iterator[ForkedPython]:
    """The production processes' server, in the test's environment but for warm's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    server = ForkedPython(dict(env, COLUMNS="200"), ROOT)
    yield server
    server.close()


def test_a_signed_bundle_migrated_since_is_refused_until_signed_again(
    forked: Callable[[Warm], Any], python: ForkedPython, tmp_path: Path
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = forked(Warm(dict(env, WARM_HOME=str(tmp_path / "home"), COLUMNS="200")))
    path, key = _signed_format2(tmp_path, warm)
    pub = Path(f"{key}.pub")
    before = _verify(warm, path, pub)  # read as it is: format 2, as signed
    assert before.returncode == 0, before.stdout + before.stderr
    assert _serve(python, warm, path, pub).stdout.split() == ["2"]

    assert warm("clean", path).returncode == 0  # a write open: migrated to format 3
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == FORMAT_VERSION
    assert conn.execute("SELECT count(*) FROM signatures").fetchone()[0] == 1  # not re-signed
    conn.close()

    after = _verify(warm, path, pub)
    assert after.returncode != 0 and "Traceback" not in after.stderr
    said = [ln for ln in (after.stdout + after.stderr).splitlines() if "no longer covers" in ln]
    assert len(said) == 1, after.stdout + after.stderr
    assert f"signed at format 2, it is format {FORMAT_VERSION} now" in said[0]
    refused = _serve(python, warm, path, pub)
    assert refused.returncode != 0 and "no longer covers" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) <= 2 or "Traceback" in refused.stderr

    assert warm("sign", path, "--key", key).returncode == 0  # signed again: served again
    assert _verify(warm, path, pub).returncode == 0
    assert _serve(python, warm, path, pub).stdout.split() == ["2"]
