"""A fingerprint or manifest row `warm stats` names as a corrupt entry is named as one by
`warm verify` too (exit 1, as for any corrupt row), in the same words; `warm check`,
which serves no fingerprint, still judges the entries. Real files, the real CLI in
subprocesses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from forked_cli import ForkedWarm
from test_hostile_files import hostile


@pytest.fixture(scope="module")
def made(made: tuple[Warm, Path], forking_servers: Any) -> tuple[Any, Path]:
    """conftest's `made`, its `warm` forked as `warm` is here (`tests/forked_cli.py`)."""
    warm, good = made
    return ForkedWarm(warm, forking_servers), good


def test_verify_names_a_corrupt_fingerprint_row_as_stats_does(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    for data in ('{"name": NaN}', "[1, 2]", "not json"):
        path = hostile(
            good, tmp_path, f"UPDATE fingerprints SET data = '{data}' WHERE kind = 'device'"
        )
        stats = warm("stats", path)
        assert stats.returncode == 2 and "corrupt fingerprint entry" in stats.stderr, stats.stderr
        named = stats.stderr[
            stats.stderr.index("corrupt fingerprint") :
        ].strip()  # as stats names it
        verify = warm("verify", path)
        assert verify.returncode == 1, verify.stdout + verify.stderr
        assert named in verify.stdout and "sound" not in verify.stdout, verify.stdout
        check = warm("check", path)
        assert check.returncode == 0 and "Traceback" not in check.stderr, check.stderr
    assert warm("verify", good).returncode == 0


def test_verify_names_a_corrupt_manifest_row_as_stats_does(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    too_long = "printf('%.*c', 5000, 'v')"
    path = hostile(good, tmp_path, f"UPDATE manifest SET value = {too_long} WHERE key = 'updated'")
    stats = warm("stats", path)
    assert stats.returncode == 2 and "corrupt manifest entry" in stats.stderr, stats.stderr
    named = stats.stderr[stats.stderr.index("corrupt manifest") :].strip()
    verify = warm("verify", path)
    assert verify.returncode == 1, verify.stdout + verify.stderr
    assert named in verify.stdout, verify.stdout
    assert "manifest has no 'updated'" not in verify.stdout  # named once: as corrupt
