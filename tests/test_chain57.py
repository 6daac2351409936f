"""The tie helper is run by its path, its owner checked once a process: one in a folder whose
chain up to `/` another user may change is never run (trial57f: a group member renamed a
group-writable home's `tie/` during a `warm run` and had a script of theirs run as the user,
the run ending 0). Real folders and owners; the helper is built by the real /usr/bin/cc."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from warmcli.backends import tied_start

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.access("/usr/bin/cc", os.X_OK),
    reason="the helper is built by /usr/bin/cc, on Linux",
)


@pytest.mark.parametrize(
    ("mode", "held"), [(0o755, True), (0o775, False), (0o777, False), (0o1777, True)]
)
def test_a_folder_others_may_change_above_the_helper_is_not_held(
    tmp_path: Path, mode: int, held: bool
) -> None:
    shared = tmp_path / "shared"
    (shared / "home" / "tie").mkdir(parents=True)
    shared.chmod(mode)
    assert tied_start._held(str(shared / "home" / "tie")) is held


def test_a_folder_above_owned_by_another_user_is_not_held(tmp_path: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    other = tmp_path / "other"
    (other / "tie").mkdir(parents=True)
    os.chown(other, 65534, 65534)
    assert not tied_start._held(str(other / "tie"))


def test_a_group_writable_home_builds_and_runs_no_helper(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fails before: the helper was built in such a home's `tie/` and run from it."""
    home = tmp_path / "home"
    home.mkdir()
    home.chmod(0o2775)
    monkeypatch.setattr(tied_start, "_folders", lambda: [str(home / "tie")])
    assert tied_start._find_or_make() is None
    assert not any((home / "tie").glob("warm-tie-*"))
    home.chmod(0o755)
    made = tied_start._find_or_make()
    assert made is not None and Path(made).parent == home / "tie"
    home.chmod(0o775)  # made, then the home opened to the group: found, never run
    assert tied_start._find_or_make() is None
