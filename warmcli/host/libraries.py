"""The host library cache: shared objects by sha256, as files the dynamic loader can open.

`dlopen` needs a file, so a host kernel binary must be on disk before it is
loaded. Each binary is written once, atomically (a unique 0600 temporary file,
then a rename), as `<sha256>.so` in `host-libraries/` under warm's home
(`warmcli.home`; mode 0700), and every later process that loads the same binary
loads the file already there: no write, no temporary directory. This is what
Triton's and CuPy's kernel caches do. Native code is loaded from it, so the
directory and each file must belong to this user with nobody else allowed to
write them; a file that is not so, or whose size is not the binary's, is
written again, and one the loader refuses is written again once. The directory
keeps at most `MAX_LIBRARIES` files: past that, the least recently used are
removed when a new one is written (a file in use stays mapped in the processes
that loaded it; a file is always replaced, never rewritten in place). Where the
directory cannot be used, a private temporary directory of this process is, and
`close` removes it. This module never reads a bundle and never decides what to
load.
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
TMP_SUFFIX = ".tmp"


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
            if _present(path, len(binary)):
                with contextlib.suppress(OSError):  # damaged since: written again below
                    return ctypes.CDLL(path)
            try:
                _write(shared, path, binary)
            except OSError:
                pass  # a full or read-only disk: the private directory may still do
            else:
                _prune(shared)
                try:
                    return ctypes.CDLL(path)
                except OSError:
                    # Just written, yet refused (a `noexec` home, or a bad binary): not left
                    # for the next process, and not tried again by this one.
                    with contextlib.suppress(OSError):
                        os.unlink(path)
                    self._shared = None
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

    def _write_private(self, name: str, binary: bytes) -> str:
        if self._private is None:
            self._private = tempfile.mkdtemp(prefix="warm-host-")
        path = os.path.join(self._private, name)
        if not os.path.exists(path):
            _write(self._private, path, binary)
        return path


def _ours(st: os.stat_result) -> bool:
    """Owned by this user and writable by nobody else: native code is loaded from it."""
    owner = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    return owner and not st.st_mode & 0o022


def _present(path: str, size: int) -> bool:
    """Whether `path` holds a file this cache wrote: a regular file of this size, this
    user's alone (anything else is written again, replacing it)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_size != size or not _ours(st):
        return False
    if time.time() - st.st_mtime > TOUCH_AFTER_S:
        with contextlib.suppress(OSError):
            os.utime(path)  # the LRU order the prune goes by
    return True


def _write(directory: str, path: str, binary: bytes) -> None:
    """Write `binary` to `path` atomically: a reader sees no file or the whole file.

    The temporary file is unique (`mkstemp`: two writers of one binary, in threads or in
    containers that share a home and a PID, never write into the same file) and 0600.
    """
    fd, tmp = tempfile.mkstemp(dir=directory, suffix=TMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(binary)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _prune(directory: str) -> None:
    """Past `MAX_LIBRARIES` files, remove the least recently used down to `PRUNE_TO`;
    temporary files a crashed writer left go when they are an hour old."""
    now = time.time()
    aged: list[tuple[float, str]] = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            try:
                mtime = entry.stat().st_mtime
            except OSError:
                continue  # removed meanwhile by another process's prune
            if entry.name.endswith(".so"):
                aged.append((mtime, entry.path))
            elif entry.name.endswith(TMP_SUFFIX) and now - mtime > TOUCH_AFTER_S:
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
    if len(aged) <= MAX_LIBRARIES:
        return
    aged.sort()
    for _, path in aged[: len(aged) - PRUNE_TO]:
        with contextlib.suppress(OSError):
            os.unlink(path)


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
    return path if stat.S_ISDIR(st.st_mode) and _ours(st) else None
