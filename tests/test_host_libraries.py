"""The host library cache for real: shared objects built by the system C compiler, loaded
with `dlopen` from `host-libraries/` under a temporary warm home, across processes."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from warmcli import Kernel, Runtime
from warmcli.backends.base import DeviceError
from warmcli.backends.host import HostDevice, libraries
from warmcli.backends.host.libraries import DIRECTORY, LibraryCache
from warmcli.home import write_private

SCALE = Kernel(
    "void scale(float *x, float a, int n) { for (int i = 0; i < n; i++) x[i] *= a; }",
    "scale",
    "Pfi",
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def _binary(tmp_path: Path, value: int) -> bytes:
    source = tmp_path / f"k{value}.c"
    source.write_text(f"int answer(void) {{ return {value}; }}\n")
    out = tmp_path / f"k{value}.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), str(source)], check=True)
    return out.read_bytes()


def _place(home: Path, binary: bytes) -> Path:
    (home / DIRECTORY).mkdir(parents=True, exist_ok=True, mode=0o700)
    return home / DIRECTORY / (hashlib.sha256(binary).hexdigest() + ".so")


def _answer(library: object) -> int:
    return int(library.answer())  # type: ignore[attr-defined]


def test_a_binary_is_written_once_and_found_by_the_next_process(home: Path, tmp_path: Path) -> None:
    binary = _binary(tmp_path, 7)
    cache = LibraryCache()
    assert _answer(cache.load(binary)) == 7
    (written,) = (home / DIRECTORY).iterdir()
    assert written.read_bytes() == binary
    assert (home / DIRECTORY).stat().st_mode & 0o777 == 0o700
    before = written.stat()
    # Another process loads the same binary: the file there is used, not written again.
    script = (
        "import sys; from warmcli.backends.host.libraries import LibraryCache; "
        "print(LibraryCache().load(open(sys.argv[1], 'rb').read()).answer())"
    )
    src = tmp_path / "k7.so"
    env = dict(os.environ, WARM_HOME=str(home))
    out = subprocess.run(
        [sys.executable, "-c", script, str(src)], capture_output=True, text=True, env=env
    )
    assert out.stdout.strip() == "7", out.stderr
    after = written.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


def test_a_damaged_file_is_written_again(home: Path, tmp_path: Path) -> None:
    """Damaged between processes (a file mapped by a live process is never cut short
    under it: the cache replaces files, it never rewrites one in place)."""
    binary = _binary(tmp_path, 11)
    write_private(str(home / DIRECTORY), str(_place(home, binary)), binary)
    written = _place(home, binary)
    written.write_bytes(binary[: len(binary) // 2])  # cut short: the size says so
    assert _answer(LibraryCache().load(binary)) == 11
    assert written.read_bytes() == binary


def test_a_directory_others_may_write_is_not_used(home: Path, tmp_path: Path) -> None:
    shared = home / DIRECTORY
    shared.mkdir(parents=True)
    shared.chmod(0o777)
    cache = LibraryCache()
    assert _answer(cache.load(_binary(tmp_path, 3))) == 3
    assert list(shared.iterdir()) == []  # loaded from a private directory instead
    assert cache._private is not None
    private = cache._private.path
    assert os.path.isdir(private)
    cache.close()
    assert not os.path.exists(private)


def test_past_the_limit_the_least_recently_used_are_removed(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(libraries, "MAX_LIBRARIES", 3)
    monkeypatch.setattr(libraries, "PRUNE_TO", 2)
    cache = LibraryCache()
    binaries = [_binary(tmp_path, 100 + value) for value in range(4)]
    for age, binary in enumerate(binaries):
        cache.load(binary)
        if age < 3:
            os.utime(_place(home, binary), (1000 + age, 1000 + age))  # used in this order
    remaining = set((home / DIRECTORY).iterdir())
    assert remaining == {_place(home, binaries[2]), _place(home, binaries[3])}


def test_a_binary_the_loader_refuses_is_a_device_error_and_is_not_left(home: Path) -> None:
    device = HostDevice()
    with pytest.raises(DeviceError, match="cannot load host kernel binary"):
        device.load_module(b"\x7fELF this is not a shared object")
    assert list((home / DIRECTORY).iterdir()) == []
    device.close()


def test_a_runtime_serves_kernels_through_the_cache(home: Path) -> None:
    rt = Runtime(HostDevice())
    data = np.arange(8, dtype=np.float32)
    buf = rt.upload(data)
    rt.launch(SCALE, buf, 3.0, 8)
    np.testing.assert_allclose(rt.read(buf), data * 3)
    assert len(list((home / DIRECTORY).iterdir())) == 1
    rt.close()


def test_a_file_others_may_write_is_replaced_not_loaded(home: Path, tmp_path: Path) -> None:
    binary = _binary(tmp_path, 21)
    planted = _place(home, binary)
    planted.write_bytes(_binary(tmp_path, 666).ljust(len(binary), b"\0")[: len(binary)])
    planted.chmod(0o666)  # same size, but anyone could have written it
    assert _answer(LibraryCache().load(binary)) == 21
    assert planted.read_bytes() == binary and planted.stat().st_mode & 0o777 == 0o600


def test_writers_of_one_binary_in_threads_never_publish_a_partial_file(
    home: Path, tmp_path: Path
) -> None:
    """Each thread has its own cache (as two runtimes would) and writes the same file."""
    source = tmp_path / "big.c"
    source.write_text(
        "static const char pad[4 << 20] = {1};\nint answer(void) { return pad[0]; }\n"
    )
    out = tmp_path / "big.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), str(source)], check=True)
    binary = out.read_bytes()
    caches = [LibraryCache() for _ in range(4)]

    def write_and_check(cache: LibraryCache) -> None:
        for _ in range(5):
            write_private(str(home / DIRECTORY), str(_place(home, binary)), binary)
            assert _place(home, binary).read_bytes() == binary
        assert _answer(cache.load(binary)) == 1

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(write_and_check, caches))
    assert all(c._private is None for c in caches)  # nobody had to fall back
    assert sorted(p.name for p in (home / DIRECTORY).iterdir()) == [_place(home, binary).name]


def test_without_proc_the_checked_file_is_loaded_by_its_path(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where there is no /proc (its descriptor's name cannot be loaded, nor found), the file
    just checked is loaded by its path; with /proc there, a refusal by the loader is an
    error, not a load by path."""
    binary = _binary(tmp_path, 11)
    loaded: list[str] = []
    real_open = libraries._dlopen

    def no_proc(name: str, mode: int) -> int:
        loaded.append(name)
        if name.startswith("/proc/"):
            raise OSError(f"{name}: cannot open shared object file")
        return real_open(name, mode)

    monkeypatch.setattr(libraries, "_dlopen", no_proc)
    real_exists = os.path.exists
    monkeypatch.setattr(
        os.path, "exists", lambda p: not str(p).startswith("/proc/") and real_exists(p)
    )
    assert _answer(LibraryCache().load(binary)) == 11
    assert loaded[-1] == str(_place(home, binary))  # by its path, in warm's home
    monkeypatch.setattr(os.path, "exists", real_exists)  # /proc there: the refusal stands
    loaded.clear()
    with pytest.raises(OSError):
        libraries._load_verified(str(_place(home, binary)), binary)
    assert loaded and all(n.startswith("/proc/") for n in loaded)
