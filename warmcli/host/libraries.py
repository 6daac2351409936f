"""The host library cache: shared objects by sha256, as files the dynamic loader can open.

`dlopen` needs a file, so a host kernel binary must be on disk before it is
loaded. Each binary is written once, atomically, as `<sha256>.so` in
`host-libraries/` under warm's home (`warmcli.home`; mode 0700, used only when it
belongs to this user and nobody else may write it), and every later process that
loads the same binary loads the file already there: no write, no temporary
directory. This is what Triton's and CuPy's kernel caches do. A file's name is the
sha256 of what was written under it, and a file whose size is not the binary's is
written again; one the loader cannot open is written again once. The directory
keeps at most `MAX_LIBRARIES` files: past that, the least recently used are removed
when a new one is written (a file in use stays mapped in the processes that loaded
it). Where the directory cannot be used, a private temporary directory of this
process is, and `close` removes it. This module never reads a bundle and never
decides what to load.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import shutil
import stat
import tempfile
import time

from warmcli.home import warm_home

DIRECTORY = "host-libraries"
MAX_LIBRARIES = 512
PRUNE_TO = 384  # files kept after a prune, so a prune does not run at every write
TOUCH_AFTER_S = 3600.0  # a file used more recently than this is not touched again


class LibraryCache:
    """Where one host device puts its binaries before loading them; see the module doc."""

    def __init__(self) -> None:
        self._shared: str | bool | None = False  # False: not looked at yet; None: unusable
        self._private: str | None = None

    def load(self, binary: bytes) -> ctypes.CDLL:
        """The binary, loaded; `OSError` if the loader refuses it wherever it is put."""
        name = hashlib.sha256(binary).hexdigest() + ".so"
        shared = self._shared_directory()
        if shared is not None:
            path = os.path.join(shared, name)
            if self._present(path, len(binary)):
                with contextlib.suppress(OSError):  # damaged since: written again below
                    return ctypes.CDLL(path)
            try:
                self._write(path, binary)
            except OSError:
                pass  # a full or read-only disk: the private directory may still do
            else:
                self._prune(shared)
                try:
                    return ctypes.CDLL(path)
                except OSError:
                    with contextlib.suppress(OSError):
                        os.unlink(path)  # not left for the next process to trip on
        return ctypes.CDLL(self._write_private(name, binary))

    def close(self) -> None:
        """Remove the private directory, if one was needed."""
        if self._private is not None:
            shutil.rmtree(self._private, ignore_errors=True)
            self._private = None

    def _shared_directory(self) -> str | None:
        if self._shared is False:
            self._shared = _usable_directory(str(warm_home() / DIRECTORY))
        return self._shared  # type: ignore[return-value]

    @staticmethod
    def _present(path: str, size: int) -> bool:
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return False
        if st.st_size != size:
            return False
        if time.time() - st.st_mtime > TOUCH_AFTER_S:
            with contextlib.suppress(OSError):
                os.utime(path)  # the LRU order the prune goes by
        return True

    @staticmethod
    def _write(path: str, binary: bytes) -> None:
        """Write `binary` to `path` atomically: a reader sees no file or the whole file."""
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "wb") as fh:
                fh.write(binary)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    @staticmethod
    def _prune(directory: str) -> None:
        """Past `MAX_LIBRARIES` files, remove the least recently used down to `PRUNE_TO`."""
        with contextlib.suppress(OSError):
            entries = [e for e in os.scandir(directory) if e.name.endswith(".so")]
            if len(entries) <= MAX_LIBRARIES:
                return
            entries.sort(key=lambda e: e.stat().st_mtime)
            for entry in entries[: len(entries) - PRUNE_TO]:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)

    def _write_private(self, name: str, binary: bytes) -> str:
        if self._private is None:
            self._private = tempfile.mkdtemp(prefix="warm-host-")
        path = os.path.join(self._private, name)
        if not os.path.exists(path):
            self._write(path, binary)
        return path


def _usable_directory(path: str) -> str | None:
    """`path`, created if need be, when it is this user's alone; else None."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            st = os.stat(path)
        except OSError:
            return None
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode) or st.st_mode & 0o022:
        return None
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return None
    return path
