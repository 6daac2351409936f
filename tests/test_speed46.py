"""A hot host start's compiler identity, made with fewer calls: the same identity.

The name of the file cc resolves to (is it a launcher?) is read from its links alone, as
`realpath` names it; cc's program folders that cannot be searched are asked about no program,
and hide none in the folders after them. Real files, real links, the real cc.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from warmcli.backends import toolchain
from warmcli.backends.host.compiler import HostCompiler
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


def test_a_program_folder_that_cannot_be_searched_hides_none_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Folders not there, one below them, a file named as a folder: passed over, and the
    wrapper `as` in the folder after them is the one keyed, as cc runs it."""
    programs = tmp_path / "programs"
    programs.mkdir()
    wrapper = programs / "as"
    wrapper.write_text('#!/bin/sh\nexec as "$@"\n')
    wrapper.chmod(0o755)
    (tmp_path / "file").write_text("")
    gone = tmp_path / "gone"
    folders = [f"{gone}/", f"{gone}/sub/", f"{tmp_path}/file/", f"{programs}/"]
    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("COMPILER_PATH", os.pathsep.join(folders))
    version = HostCompiler().toolchain.version
    assembler = version.split("; as ", 1)[1].split("; ", 1)[0]
    assert toolchain.WRAPPER_MARK in assembler, version
