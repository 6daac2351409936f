"""The compiler version line remembered across processes, keyed by the binary's stamp.

A small compiled binary stands in for a compiler (it answers `--version`: a script's
version is never remembered); the remembered file is the real one under a temporary
`WARM_HOME`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import cc_binary

from warmcli.backends import toolchain
from warmcli.backends.toolchain import ToolchainError, probe, versions_file


def _compiler(path: Path, version: str) -> Path:
    return cc_binary(path, version)  # a binary: a script's version is never remembered


def _line(found: toolchain.Toolchain) -> str:
    """Its version line, without the digest a script (as these stand-ins are) adds."""
    return found.version.partition(" (wrapper script sha256:")[0]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(toolchain, "RACY_SECONDS", 0.0)
    probe.cache_clear()
    yield tmp_path
    probe.cache_clear()


def test_a_remembered_version_is_served_without_running(home: Path) -> None:
    cc = _compiler(home / "mycc", "mycc 1.0")
    assert _line(probe("cc", str(cc))) == "mycc 1.0"
    remembered = json.loads(versions_file().read_text())
    (stamp,) = remembered
    versions_file().write_text(json.dumps({stamp: "remembered 1.0"}))
    probe.cache_clear()
    assert _line(probe("cc", str(cc))) == "remembered 1.0"  # no --version run


def test_a_rewritten_compiler_is_probed_again(home: Path) -> None:
    cc = _compiler(home / "mycc", "mycc 1.0")
    assert _line(probe("cc", str(cc))) == "mycc 1.0"
    _compiler(cc, "mycc 10.0")
    probe.cache_clear()
    assert _line(probe("cc", str(cc))) == "mycc 10.0"


def test_a_just_written_compiler_is_not_remembered(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(toolchain, "RACY_SECONDS", 60.0)
    cc = _compiler(home / "mycc", "mycc 1.0")
    assert _line(probe("cc", str(cc))) == "mycc 1.0"
    assert not versions_file().exists()


def test_a_corrupt_memory_costs_only_a_run(home: Path) -> None:
    versions_file().parent.mkdir(parents=True)
    versions_file().write_text("{not json")
    cc = _compiler(home / "mycc", "mycc 1.0")
    assert _line(probe("cc", str(cc))) == "mycc 1.0"
    assert [
        v.partition(" (wrapper")[0] for v in json.loads(versions_file().read_text()).values()
    ] == ["mycc 1.0"]


def test_a_compiler_that_hangs_or_answers_in_bytes_is_a_toolchain_error(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--version` that never finishes is stopped and named; a version line that is not
    UTF-8 (a localised compiler) is read, not a UnicodeDecodeError."""
    monkeypatch.setattr(toolchain, "VERSION_TIMEOUT", 0.5)
    hangs = home / "hangs"
    hangs.write_text("#!/bin/sh\nexec sleep 30\n")
    hangs.chmod(0o755)
    with pytest.raises(ToolchainError, match=r"did not answer --version within 0\.5 s"):
        probe("cc", str(hangs))
    latin = home / "latin"
    latin.write_bytes(b"#!/bin/sh\nprintf 'cc versi\\363n 1.0\\n'\n")
    latin.chmod(0o755)
    assert _line(probe("cc", str(latin))) == "cc versi\ufffdn 1.0"


def test_a_link_repointed_at_another_compiler_is_probed_again(home: Path) -> None:
    """The memo keys on the file the name resolves to, so `update-alternatives` counts."""
    old = _compiler(home / "cc-1", "cc 1.0")
    new = _compiler(home / "cc-2", "cc 2.0")
    link = home / "cc"
    link.symlink_to(old)
    assert _line(probe("cc", str(link))) == "cc-1 1.0"  # named as the binary it resolves to
    link.unlink()
    link.symlink_to(new)
    probe.cache_clear()
    assert _line(probe("cc", str(link))) == "cc-2 2.0"


def test_a_compiler_found_on_path_is_named_absolutely(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (home / "bin").mkdir()
    _compiler(home / "bin" / "mycc", "mycc 3.0")
    monkeypatch.setenv("PATH", f"{home / 'empty'}:{home / 'bin'}")
    found = probe("cc", "mycc")
    assert found.path == str(home / "bin" / "mycc") and _line(found) == "mycc 3.0"
    with pytest.raises(ToolchainError, match="not found"):
        probe("cc", "no-such-cc")
    monkeypatch.setenv("PATH", "")
    monkeypatch.chdir(home / "bin")
    probe.cache_clear()
    with pytest.raises(ToolchainError, match="not found"):
        probe("cc", "mycc")  # an empty PATH is not the working directory


@pytest.mark.parametrize("folder", ["", ".", "/", "/usr/bin", "/usr/bin/", "a//", "relative"])
def test_a_path_entry_is_joined_as_os_path_join_joins_it(folder: str) -> None:
    assert toolchain._joined(folder, "cc") == os.path.join(folder or os.curdir, "cc")


def test_the_versions_file_is_in_warm_home_with_or_without_warm_home_set(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from warmcli.home import home_dir, warm_home

    assert versions_file() == warm_home() / "toolchains.json" == home / "home" / "toolchains.json"
    monkeypatch.delenv("WARM_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    assert Path(home_dir()) == warm_home()
    assert versions_file() == warm_home() / "toolchains.json"
