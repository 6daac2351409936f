"""Small fixes of stop 48's merges, each as a user meets it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from tests.conftest import Warm


def test_a_refusal_under_trusted_keys_given_in_code_names_them_not_the_variable(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    """`use_bundle(path, trusted_keys=[...])` with `WARM_TRUSTED_KEYS` unset said the bundle
    was refused "and WARM_TRUSTED_KEYS asks for a signature": a variable nobody set."""
    pytest.importorskip("cryptography")
    key = tmp_path / "ci.key"
    assert warm("keygen", key).returncode == 0
    bundle = host_bundle(tmp_path / "app.warm")  # unsigned
    code = (
        "import warmcli\n"
        f"try:\n    warmcli.use_bundle({str(bundle)!r}, trusted_keys=[{str(key) + '.pub'!r}])\n"
        "except warmcli.SignatureError as e:\n    print(e)\n"
    )
    env = {k: v for k, v in warm.env.items() if k != "WARM_TRUSTED_KEYS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert "bundle refused: unsigned" in out.stdout, out.stdout
    assert "trusted_keys=" in out.stdout, out.stdout
