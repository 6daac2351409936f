"""NVRTC's identity (its version read from an empty program) remembered in warm's home.

Real NVRTC (installed by `make install`; skipped where it is not): the first process on
a machine compiles the empty program, the next ones find the line by the library
file's stamp and never load NVRTC; a changed file is read again.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from warmcli.backends import toolchain
from warmcli.backends.cuda import nvrtc
from warmcli.backends.toolchain import is_remembered, versions_file

LIBRARY = nvrtc.find_nvrtc()
if LIBRARY is None:  # pragma: no cover - make install brings NVRTC
    pytest.skip("NVRTC not installed (cuda-bindings, nvidia-cuda-nvrtc)", allow_module_level=True)


@pytest.fixture
def reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """An empty warm home; every real version read is recorded (by the path it was for)."""
    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(toolchain, "RACY_SECONDS", 0.0)
    calls: list[str] = []
    real = nvrtc._read_version

    def counted(name: str, where: str) -> str:
        calls.append(where)
        return real(name, where)

    monkeypatch.setattr(nvrtc, "_read_version", counted)
    nvrtc.identity.cache_clear()
    yield calls
    nvrtc.identity.cache_clear()


def _identity(path: str) -> toolchain.Toolchain:
    st = os.stat(path)
    return nvrtc.identity(path, st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)


def test_only_the_first_process_reads_the_version(reads: list[str]) -> None:
    assert LIBRARY is not None
    assert not is_remembered("nvrtc", LIBRARY)
    first = nvrtc.NvrtcCompiler().toolchain
    assert reads == [LIBRARY] and first.version.startswith("NVRTC release")
    assert is_remembered("nvrtc", LIBRARY)
    nvrtc.identity.cache_clear()  # a cold process: nothing in memory, the home kept
    again = nvrtc.NvrtcCompiler().toolchain
    assert reads == [LIBRARY], "the remembered line is served without an empty program"
    assert again == first


def test_a_changed_library_file_is_read_again(reads: list[str], tmp_path: Path) -> None:
    # The version comes from the loaded NVRTC; the file stands in for its library on disk.
    library = tmp_path / "libnvrtc.so.13"
    library.write_bytes(b"one")
    version = _identity(str(library)).version
    nvrtc.identity.cache_clear()
    assert _identity(str(library)).version == version and len(reads) == 1
    library.write_bytes(b"another")  # rewritten: another size, mtime and ctime
    nvrtc.identity.cache_clear()
    assert not is_remembered("nvrtc", str(library))
    assert _identity(str(library)).version == version and len(reads) == 2
    assert is_remembered("nvrtc", str(library))  # the new stamp, for the next process
    assert len(json.loads(versions_file().read_text())) == 2


def test_a_cold_process_with_the_line_remembered_never_loads_nvrtc(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from warmcli.backends.cuda.nvrtc import NvrtcCompiler\n"
        "print(NvrtcCompiler().toolchain.version)\n"
        "print('cuda.bindings.nvrtc' in sys.modules)\n"
    )
    env = {**os.environ, "WARM_HOME": str(tmp_path / "home")}

    def process() -> list[str]:
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        return out.stdout.split("\n")[:2]

    first_version, first_loaded = process()
    second_version, second_loaded = process()
    assert first_loaded == "True", "the first process on the machine reads the version"
    assert (second_version, second_loaded) == (first_version, "False")
