"""A compiler binary (or NVRTC's library file) swapped while its version is read: the
line read is never remembered under the stamp taken before (the old file's), so the
next probe reads the new one's."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import cc_binary

from warmcli.backends import toolchain
from warmcli.backends.cuda import nvrtc
from warmcli.backends.toolchain import is_remembered, probe, versions_file


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(toolchain, "RACY_SECONDS", 0.0)
    probe.cache_clear()
    nvrtc.identity.cache_clear()
    yield tmp_path
    probe.cache_clear()
    nvrtc.identity.cache_clear()


def _script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_a_compiler_swapped_while_it_answers_is_not_remembered(home: Path) -> None:
    cc = home / "mycc"
    cc_binary(home / "next", "mycc 2.0")  # a binary: a script's version is never remembered
    # The old binary answers, but a new one is moved over its path meanwhile.
    _script(cc, f"cp {home}/next {home}/tmp && mv {home}/tmp {cc}\necho 'mycc 1.0'")
    old = os.stat(cc)
    assert probe("cc", str(cc)).version.startswith("mycc 1.0 (wrapper script sha256:")
    assert os.stat(cc).st_ino != old.st_ino  # swapped
    assert not versions_file().exists() or json.loads(versions_file().read_text()) == {}
    probe.cache_clear()
    assert probe("cc", str(cc)).version == "mycc 2.0"  # the new binary, read again
    assert is_remembered("cc", str(cc))


def test_an_nvrtc_file_swapped_while_read_is_neither_kept_nor_remembered(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    library = home / "libnvrtc.so.13"
    library.write_bytes(b"one")
    reads: list[str] = []

    def swapped(name: str, where: str) -> str:
        reads.append(where)
        if len(reads) == 1:
            (home / "new").write_bytes(b"another")
            os.replace(home / "new", library)
        return f"NVRTC {len(reads)}"

    monkeypatch.setattr(nvrtc, "_read_version", swapped)
    st = os.stat(library)
    stamp = (st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    assert nvrtc.identity(str(library), *stamp).version == "NVRTC 1"
    assert not is_remembered("nvrtc", str(library))
    assert nvrtc.identity(str(library), *stamp).version == "NVRTC 2"  # not kept: read again
    assert is_remembered("nvrtc", str(library))  # the new file's line, under its stamp
