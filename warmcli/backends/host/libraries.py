"""The host library cache: shared objects by sha256, as files the dynamic loader can open.

`dlopen` needs a file, so a host kernel binary must be on disk before it is
loaded. Each binary is written once, atomically (a unique 0600 temporary file,
then a rename), as `<sha256>.so` in `host-libraries/` under warm's home
(`warmcli.home`; mode 0700), and every later process that loads the same binary
loads the file already there: no write, no temporary directory. This is what
Triton's and CuPy's kernel caches do. Native code is loaded from it, so the
directory and each file must belong to this user with nobody else allowed to
write them (nor the home it is in, nor a link another user made in its place: they
would point it at a folder of this user's, which the prune empties), and a file is
loaded only from a descriptor opened without following links, after its bytes were
compared with the binary (hashed to its name): a file not so
(a link, a hard link, another size, other bytes) is written again, and one the
loader refuses is written again once. The directory
keeps at most `MAX_LIBRARIES` files: past that, the least recently used are
removed when a new one is written (a file in use stays mapped in the processes
that loaded it; a file is always replaced, never rewritten in place). Loading
never changes the process's floating-point state: a library built with
`-ffast-math`, `-Ofast` or `-funsafe-math-optimizations` carries GCC's crtfastmath
constructor, which turns on flush-to-zero and denormals-are-zero for the loading
thread, so the floating-point environment (`fegetenv`) is put back (`fesetenv`)
after every `dlopen`: a cold process, which loads every tune candidate, computes as
a hot one, which loads only the pick (whoever built the binary). Where the
directory cannot be used, a private temporary directory of this process is
(`warmcli.scratch.HeldFolder`, `warm-host-*.held`), and `close` removes it, or its
finalizer as the cache is collected or the process ends (in the process that made it: a
forked child leaves it to its parent, and writes into one of its own); one a process
ended by SIGKILL, SIGTERM or `os._exit` left is removed by the next that makes one. The
process's state here is the libraries it loaded from the shared directory (by file: each
loaded once; no descriptor is held for them, so a process may load thousands under `ulimit
-n 64`; a private directory holds one, its lock), and libc's `fegetenv`/`fesetenv`, looked
up once. This module never reads a bundle and never
decides what to load.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import stat
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from warmcli.forking import renew_on_fork
from warmcli.home import TMP_SUFFIX, in_home, make_folder, private, write_private

if TYPE_CHECKING:
    from warmcli.scratch import HeldFolder

_dlopen = ctypes._dlopen  # what `ctypes.CDLL` loads a library with
DIRECTORY = "host-libraries"
MAX_LIBRARIES = 512
_COMPARED_WHOLE = 1 << 20  # a larger binary is compared with its file a chunk at a time
PRUNE_TO = 384  # files kept after a prune, so a prune does not run at every write
TOUCH_AFTER_S = 3600.0  # a file used more recently than this is not touched again


class LibraryCache:
    """Where one host device puts its binaries before loading them; see the module doc."""

    def __init__(self) -> None:
        self._shared: str | bool | None = False  # False: not looked at yet; None: unusable
        self._private: HeldFolder | None = None

    def load(self, binary: bytes, sha256: str | None = None) -> ctypes.CDLL:
        """The binary, loaded; `OSError` if the loader refuses it wherever it is put. Its
        file is named by `sha256` when given (its caller checked it: a bundle's blob), else
        by its digest; a file is loaded only if its bytes are the binary's, whatever its name."""
        sha = sha256 or hashlib.sha256(binary).hexdigest()
        shared = self._shared_directory()
        if shared is not None:
            path = os.path.join(shared, sha + ".so")
            with contextlib.suppress(OSError):  # damaged since: written again below
                found = _load_verified(path, binary)
                if found is not None:
                    return found
            try:
                write_private(shared, path, binary)
            except OSError:
                pass  # a full or read-only disk: the private directory may still do
            else:
                _prune(shared)
                try:
                    found = _load_verified(path, binary)
                except OSError:
                    found = None
                if found is not None:
                    return found
                # Just written, yet refused (a `noexec` home, or a bad binary): not left
                # for the next process, and not tried again by this one.
                with contextlib.suppress(OSError):
                    os.unlink(path)
                self._shared = None
        return _Library(self._write_private(sha + ".so", binary))

    def close(self) -> None:
        """Remove the private directory, if one was needed (by this process: a forked
        child's copy of its parent's cache leaves the parent's folder, still in use)."""
        if self._private is not None:
            self._private.remove()
            self._private = None

    def _shared_directory(self) -> str | None:
        if self._shared is False:
            self._shared = _usable_directory(in_home(DIRECTORY))
        return self._shared  # type: ignore[return-value]

    def _write_private(self, name: str, binary: bytes) -> str:
        # A forked child writes into a folder of its own: its parent's goes when the parent
        # ends, which may be first (a daemon's double fork, a server's master restarting);
        # one whose lock this process let go (a daemon's `closerange`) is another's to remove.
        held = self._private
        if held is None or held.made_by != os.getpid() or not held.held():
            from warmcli.scratch import HeldFolder  # most processes never need a private folder

            self._private = HeldFolder("warm-host-")
        path = os.path.join(self._private.path, name)
        if not os.path.exists(path):
            write_private(self._private.path, path, binary)
        return path


_FENV_BYTES = 1024  # an `fenv_t` is 32 bytes on x86-64, 8 on arm64: room to spare
_fenv: tuple[Any, Any] | bool | None = False  # False: not looked up yet; None: none


def _fenv_calls() -> tuple[Any, Any] | None:
    """libc's `fegetenv` and `fesetenv` (looked up on first load), or None where there
    are none. Looked up in the process's own symbols by `ctypes.pythonapi`'s function
    class, which ctypes made already (a class made here would cost a hot start ~30 µs);
    called with a buffer, as that class passes it, by its address."""
    global _fenv
    if _fenv is False:
        main = ctypes.pythonapi  # `dlopen(NULL)`: the program and the libraries it linked
        try:
            _fenv = (main._FuncPtr(("fegetenv", main)), main._FuncPtr(("fesetenv", main)))
        except AttributeError:
            _fenv = None
    return _fenv  # type: ignore[return-value]


def _dlopen_keeping_fenv(name: str) -> int:
    """`dlopen(name)` with the calling thread's floating-point environment (FTZ/DAZ, the
    rounding mode, the exception masks) put back as it was, whatever the library's
    constructors set."""
    calls = _fenv_calls()
    if calls is None:
        return _dlopen(name, ctypes.DEFAULT_MODE)
    get, put = calls
    # Passed by the address of its first byte: no array type made (a first load's ~30 µs).
    saved = ctypes.byref(ctypes.c_char.from_buffer(bytearray(_FENV_BYTES)))
    if get(saved) != 0:
        return _dlopen(name, ctypes.DEFAULT_MODE)
    try:
        return _dlopen(name, ctypes.DEFAULT_MODE)
    finally:
        put(saved)


class _Library(ctypes.CDLL):
    """A loaded library whose functions are made by their signature's prototype (never
    looked up by name here): loaded as `ctypes.CDLL` loads it, without the function
    class of its own each `CDLL` makes (one shared, made on first use)."""

    def __init__(self, name: str) -> None:  # `CDLL`'s, less the class it builds per library
        self._name = name
        self._handle = _dlopen_keeping_fenv(name)

    def __getitem__(self, name_or_ordinal: str | int) -> object:  # `lib.name` comes here too
        if type(self)._FuncPtr is None:  # a function by name: the class a `CDLL` makes
            type(self)._FuncPtr = ctypes.CDLL(None)._FuncPtr
        return super().__getitem__(name_or_ordinal)


_held: dict[tuple[int, int], ctypes.CDLL] = {}  # by (device, inode): loaded by descriptor
_held_lock = threading.Lock()
renew_on_fork(sys.modules[__name__], "_held_lock")


def _load_verified(path: str, binary: bytes) -> ctypes.CDLL | None:
    """The library at `path`, loaded from the very file whose bytes are `binary`'s; None
    (it is written again) when the file is missing, a link, not a regular file of this
    user's alone, of another size or of other bytes. `OSError` if the loader refuses.

    The file is opened without following links, read back and compared with `binary`
    (what was hashed to its name), and loaded from the open descriptor
    (`/proc/self/fd/N`, spelled as no earlier load spelled it: see `_descriptor_name`), so
    what runs is what was hashed; the descriptor is closed once loaded.
    """
    try:  # a FIFO opens at once (no regular file: written again)
        fd = os.open(
            path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
        )
    except OSError:  # none there, or a symbolic link
        return None
    try:
        st = os.fstat(fd)
        size = len(binary)
        whole = stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_size == size
        if not (whole and private(st) and _holds(fd, binary)):
            return None
        if abs(time.time() - st.st_mtime) > TOUCH_AFTER_S:  # (one dated ahead: a clock stepped)
            with contextlib.suppress(OSError):
                os.utime(fd)  # the LRU order the prune goes by
        with _held_lock:
            held = _held.get((st.st_dev, st.st_ino))
            if held is None:  # else: this very file, loaded already
                by_descriptor = _descriptor_name(fd, len(_held))
                try:  # /proc looked at only if the loader fails (a first look costs ~30 µs)
                    held = _Library(by_descriptor)
                except OSError:
                    if os.path.exists(by_descriptor):  # the loader refused the file
                        raise
                    return _Library(path)  # no /proc: the file just checked, in a private directory
                _held[st.st_dev, st.st_ino] = held
        return held
    finally:
        os.close(fd)  # the loader keeps the mapping; the name it knows is never spelled again


def _descriptor_name(fd: int, count: int) -> str:
    """`/proc/self/fd/<fd>` spelled uniquely for the `count`th library loaded: the loader
    knows a library by the name it was opened by (a later `dlopen` of that very string is
    handed the library loaded first), and a descriptor's number is reused once closed, so
    each load spells its own: `count`'s binary digits as `./` (0) and `.//` (1)."""
    spelled = "".join(".//" if bit == "1" else "./" for bit in format(count, "b"))
    return f"/proc/self/fd/{spelled}{fd}"


def _holds(fd: int, binary: bytes) -> bool:
    """Whether the file open at `fd` holds `binary`, no more: one read (of its size and a
    byte past it, if it grew), or for a large binary a chunk at a time (no second copy)."""
    size = len(binary)
    if size <= _COMPARED_WHOLE:
        return os.pread(fd, size + 1, 0) == binary
    view = memoryview(binary)
    for at in range(0, size, _COMPARED_WHOLE):
        if os.pread(fd, _COMPARED_WHOLE, at) != view[at : at + _COMPARED_WHOLE]:
            return False
    return os.pread(fd, 1, size) == b""


def _prune(directory: str) -> None:
    """Past `MAX_LIBRARIES` files, remove the least recently used down to `PRUNE_TO`;
    temporary files a crashed writer left go when they are an hour old. A file dated over
    an hour ahead (written while the clock was ahead) is stamped now and ages from then, as
    `warm clean` takes a time of use in the future (else it is the newest until the clock
    reaches it, in 3000 say, and the files in use are pruned before it)."""
    now = time.time()
    aged: list[tuple[float, str]] = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            try:
                mtime = entry.stat().st_mtime
                if mtime - now > TOUCH_AFTER_S:
                    os.utime(entry.path, follow_symlinks=False)
                    mtime = now
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
    """`path`, created if need be, when it is this user's alone and no other user could have
    put it there: in a home of another user's, or one all may write without the sticky bit,
    or as a link another user made (in `/tmp`), they could point it at a folder of this
    user's, whose `*.so` and `*.tmp` files `_prune` would remove; else None."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        try:
            make_folder(os.path.dirname(path))  # warm's home: never writable by all
            os.makedirs(path, mode=0o700, exist_ok=True)
            st = os.lstat(path)
        except OSError:
            return None
    except OSError:
        return None
    try:
        home = os.stat(os.path.dirname(path))
        if stat.S_ISLNK(st.st_mode) and _others(st):  # (else the user's own: followed)
            return None
        st = os.stat(path) if stat.S_ISLNK(st.st_mode) else st
    except OSError:
        return None
    if _others(home) or home.st_mode & 0o1002 == 0o002:  # (group write: the user's own)
        return None
    return path if stat.S_ISDIR(st.st_mode) and private(st) else None


def _others(st: os.stat_result) -> bool:
    """Whether another user than this one (or root) owns what `st` describes."""
    return hasattr(os, "getuid") and st.st_uid not in (os.getuid(), 0)
