"""What stop 42 changed on main itself: a `WARM_BUNDLE` set to a flag's "off" word names no
file, and production's error says how to load no bundle, where it said only that the file
`0` was missing; a file of that name is still the bundle it names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Warm

SERVE = "import warmcli\nwarmcli.runtime('host')\nprint('served')\n"


@pytest.mark.parametrize("word", ["0", "off", "False"])
def test_warm_bundle_set_to_an_off_word_says_to_set_it_empty(
    warm: Warm, tmp_path: Path, word: str
) -> None:
    env = {**warm.env, "WARM_BUNDLE": word}
    proc = subprocess.run(
        [sys.executable, "-c", SERVE], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert proc.returncode == 1 and "served" not in proc.stdout
    last = proc.stderr.strip().splitlines()[-1]
    assert last == (
        f"warmcli.errors.BundleError: WARM_BUNDLE={word}: no such bundle "
        "(to load none, set it empty)"
    ), proc.stderr
    empty = subprocess.run(
        [sys.executable, "-c", SERVE],
        capture_output=True,
        text=True,
        env={**warm.env, "WARM_BUNDLE": ""},
        cwd=tmp_path,
    )
    assert empty.returncode == 0 and empty.stdout == "served\n", empty.stderr


def test_a_file_named_0_is_still_the_bundle_it_names(warm: Warm, tmp_path: Path) -> None:
    (tmp_path / "0").write_bytes(b"")
    env = {**warm.env, "WARM_BUNDLE": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", SERVE], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert proc.returncode == 1 and "0: not a warm bundle" in proc.stderr, proc.stderr
    assert "set it empty" not in proc.stderr
