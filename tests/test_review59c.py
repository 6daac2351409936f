"""Review of stop 59's merges (import59, env59): faults found in them, each shown by a test
that failed before its fix. Real bundles and production processes in subprocesses, the system
C compiler; no timings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm

# A production process given its trusted keys as `use_bundle(trusted_keys=...)`: it prints the
# one line its SignatureError says.
_GIVEN_KEYS = """
import sys, warmcli
try:
    warmcli.use_bundle(sys.argv[1], trusted_keys=sys.argv[2:])
    warmcli.runtime("host")
except warmcli.SignatureError as exc:
    print(exc)
"""


@pytest.mark.parametrize(
    ("keys", "said"),
    [(["/nonexistent/ci.pub"], "/nonexistent/ci.pub: cannot read key"), ([], "no trusted keys")],
)
def test_keys_given_to_use_bundle_are_never_blamed_on_warm_trusted_keys(
    made: tuple[Warm, Path], keys: list[str], said: str
) -> None:
    """env59 put `WARM_TRUSTED_KEYS: ` before every error of a trusted key that cannot be read,
    as if that variable named it; a key named by `use_bundle(path, trusted_keys=[...])` (README,
    "Signed bundles"), with WARM_TRUSTED_KEYS unset, was said to be WARM_TRUSTED_KEYS's too, and
    a user looked for a variable they never set. It is said to be `trusted_keys=`'s now."""
    warm, good = made
    env = {k: v for k, v in warm.env.items() if k != "WARM_TRUSTED_KEYS"}
    done = subprocess.run(
        [sys.executable, "-c", _GIVEN_KEYS, str(good), *keys],
        capture_output=True,
        text=True,
        env=dict(env, PYTHONPATH=str(ROOT)),
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"trusted_keys=: {said}"), done.stdout
