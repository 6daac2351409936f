"""A hot host start's compiler identity, made with fewer calls: the same identity.

The name of the file cc resolves to (is it a launcher?) is read from its links alone, as
`realpath` names it. Real files, real links.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from warmcli.backends.toolchain import resolved_name


def _links(root: Path) -> dict[str, Path]:
    """Links as installs make them: relative, absolute, through a folder link, with `..`."""
    (root / "real" / "x").mkdir(parents=True)
    (root / "a" / "b").mkdir(parents=True)
    (root / "real" / "x" / "ccache").write_text("")
    (root / "folder").symlink_to(root / "real")
    (root / "a" / "cc1").symlink_to("../real/x/ccache")
    (root / "a" / "b" / "cc").symlink_to(root / "a" / "cc1")
    (root / "real" / "x" / "gcc").symlink_to("ccache")
    (root / "real" / "x" / "up").symlink_to("../../a/b/cc")
    (root / "loop").symlink_to("loop")
    return {
        "plain": root / "real" / "x" / "ccache",
        "relative then absolute": root / "a" / "b" / "cc",
        "through a folder link": root / "folder" / "x" / "gcc",
        "up through a folder link": root / "folder" / "x" / "up",
        "a loop": root / "loop",
        "a system compiler": Path("/usr/bin/cc"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "plain",
        "relative then absolute",
        "through a folder link",
        "up through a folder link",
        "a loop",
        "a system compiler",
    ],
)
def test_the_resolved_name_is_realpaths(tmp_path: Path, case: str) -> None:
    where = str(_links(tmp_path)[case])
    assert resolved_name(where) == os.path.basename(os.path.realpath(where))
