"""The libraries a host kernel binary needs, found as this machine's loader finds them, unloaded.

A host blob built with a library option (`-lhelper`) names it in its ELF dynamic section
(`DT_NEEDED libhelper.so`): where this machine's loader does not find it, `dlopen` fails and
a production process compiles the kernel after all (or, with no compiler, cannot serve it).
`missing_library` says so for `warm check`'s preflight (`warmcli.ops.check`) from the blob's
bytes alone: a bundle's blob is never loaded to find out (its constructors would run). The
dynamic section is found as the loader finds it, by the `PT_DYNAMIC` program header, its
string table by `DT_STRTAB`'s address in a `PT_LOAD` segment; each `DT_NEEDED` is looked for
as glibc's loader looks (under another C library, musl's, no verdict is given): a name with
a slash as that path; else the `DT_RPATH` folders (where there is no `DT_RUNPATH`),
`LD_LIBRARY_PATH`, the `DT_RUNPATH` folders, the loader's cache (`/etc/ld.so.cache`, read
once while unchanged; one in a form not read here holds every name: never a false "not
servable") and the default folders (`/lib`, `/usr/lib`, their multiarch and `lib64` forms).
A file counts only where it is an ELF of the blob's word size, byte order and machine (the
loader passes over others). `$ORIGIN` is the folder the blob is loaded from
(`/proc/self/fd`: warm loads it by descriptor), which holds no library; `$LIB` and
`$PLATFORM` count as any of their usual values. The vDSO's names are always there, and a
name no folder gives that an object this process loaded answers to (`loaded_names`: numpy's
own `numpy.libs`, loaded in every warm process) is found, as the loader finds it. What the
libraries found need is followed as well, breadth first as the loader loads them (each name
found once serves every object that needs it; a library's own RPATH, with its loaders', and
RUNPATH, its `$ORIGIN` its folder), for up to `MAX_FOLLOWED` libraries, each read for its
headers (never mapped, never loaded; ELF's layout is `warmcli.backends.host.elf`'s). Bounded
by the blob, in time and memory: more than `MAX_NEEDED` needed names, a search path of more
than `MAX_FOLDERS` folders, a name or search path longer than `MAX_NAME`, or a dynamic
section with no end in `MAX_DYNAMIC` entries is itself not servable; a search looking at
more than `MAX_PROBES` files and folders (each folder once, however spelled) gives no
verdict. It owns only the cache's parsed copy, loads nothing and never prints.
"""

from __future__ import annotations

import os
import platform
import stat
import struct
import sys
import sysconfig
import threading
from collections.abc import Callable

from warmcli import config
from warmcli.backends.host import elf
from warmcli.backends.host.loaded import loaded_names
from warmcli.forking import renew_on_fork

MAX_NEEDED = 256  # more DT_NEEDED entries than this: not servable (no linker makes them)
MAX_FOLDERS = 256  # a blob's RPATH or RUNPATH of more folders: not servable
MAX_NAME = 4096  # a needed name or search path longer than this (PATH_MAX): not servable
MAX_DYNAMIC = 1 << 16  # dynamic entries read before a DT_NULL; past it: not servable
MAX_FOLLOWED = 64  # this machine's libraries whose own needs are read, per blob
MAX_PROBES = 4096  # files and folders looked at for one blob; past it: no verdict
_CACHE = "/etc/ld.so.cache"
_CACHE_MAGIC = b"glibc-ld.so.cache1.1"
_CACHE_LIMIT = 64 << 20  # a loader cache larger than this is not read
VDSO = frozenset({"linux-vdso.so.1", "linux-gate.so.1", "linux-vdso32.so.1", "linux-vdso64.so.1"})
_FOLLOW_LIMIT = 4 << 30  # a library larger than this is read for its needs no more
_READ_LIMIT = 4 << 20  # the most one read of a library takes (65,535 program headers fit)
_DT_NULL, _DT_NEEDED, _DT_STRTAB, _DT_STRSZ, _DT_RPATH, _DT_RUNPATH = 0, 1, 5, 10, 15, 29
ORIGIN = "/proc/self/fd"  # where warm's loader loads a blob from (its descriptor)


def missing_library(data: bytes) -> str:
    """Why this machine's loader would not find a library `data` (a host kernel binary
    whose ELF header `foreign_binary` passed) needs: "" where it finds each, or where
    the dynamic section cannot be read (the loader's own verdict then stands)."""
    if not _glibc() or data[:4] != elf.MAGIC or len(data) < 64:
        return ""  # another loader's rules (musl's, another OS's): no verdict
    bits, order = elf.word_and_order(data)
    try:
        view = memoryview(data)
        read = _dynamic(lambda at, n: view[at : at + n], len(data), bits, order)
    except (struct.error, OverflowError):
        return ""  # headers past the end: `foreign_binary` names a blob cut short
    if isinstance(read, str):
        return read
    needed, rpath, runpath = read
    ident = data[4:6] + data[18:20]  # word size, byte order, e_machine (e_machine's order)
    probes = _Probes()
    try:
        return _missing(needed, _search_path(rpath, runpath, ORIGIN, [], probes), ident, probes)
    except _Spent:
        return ""  # a search wider than any linker's: the loader's own verdict stands


def _missing(
    needed: list[str], searched: tuple[list[str], list[str]] | str, ident: bytes, probes: _Probes
) -> str:
    """`missing_library`'s search from a blob's `needed` names and `searched` folders."""
    if isinstance(searched, str):
        return searched
    cache = _loader_cache()
    found = set(VDSO)  # names found: loaded once, by name, for every object that needs it
    queue = [(needed, *searched, ORIGIN, "")]  # names, where, RPATH handed down, origin, by
    followed = 0
    while queue:  # breadth first, as the loader loads them
        names, folders, handed, origin, by = queue.pop(0)
        for name in names:
            if name in found:
                continue
            path = _found(name, folders, cache, ident, origin, probes)
            if path is None and "/" not in name and name in loaded_names():
                path = ""  # an object this process loaded answers to it: found, not followed
            if path is None:  # (bytes no UTF-8 said escaped: no lone surrogate in JSON text)
                said = os.fsencode(by + name).decode(errors="backslashreplace")
                return (
                    f"bundle's build needs {said}, which this machine's loader does not "
                    "find (LD_LIBRARY_PATH, RUNPATH/RPATH, the loader cache, the system's "
                    "folders): loading it would fail"
                )
            found.add(name)
            if path and followed < MAX_FOLLOWED and (more := _needs_of(path, handed, probes)):
                followed += 1
                queue.append((*more, os.path.dirname(path), f"{by}{name} ({path}), which needs "))
    return ""


def _glibc() -> bool:
    """Whether this process's C library, and so its loader, is glibc's."""
    try:
        return sys.platform == "linux" and bool(os.confstr("CS_GNU_LIBC_VERSION"))
    except (ValueError, OSError):  # a name this platform does not know
        return False


class _Spent(Exception):
    """More than `MAX_PROBES` files and folders looked at for one blob."""


class _Probes:
    """The files and folders one blob's search looks at, `MAX_PROBES` in all, each folder
    once (256 names in 512 RPATH and RUNPATH folders would be 130,000 system calls)."""

    def __init__(self) -> None:
        self.left = MAX_PROBES
        self.folders: dict[str, tuple[int, int] | None] = {}

    def spend(self) -> None:
        self.left -= 1
        if self.left < 0:
            raise _Spent

    def fits(self, path: str, ident: bytes) -> bool:
        self.spend()
        return _fits(path, ident)

    def folder(self, path: str) -> tuple[int, int] | None:
        """The (device, inode) of the folder at `path`; None where it is none."""
        if path not in self.folders:
            self.spend()
            try:  # (a NUL in a hostile name: ValueError)
                st = os.stat(path)
                self.folders[path] = (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None
            except (OSError, ValueError):
                self.folders[path] = None
        return self.folders[path]


def _needs_of(
    path: str, handed: list[str], probes: _Probes
) -> tuple[list[str], list[str], list[str]] | None:
    """What the library at `path` (this machine's, found for a blob) needs, where the loader
    looks for it and the RPATH it hands down (`handed`: its loaders'); None where its
    dynamic section cannot be read (its needs are then not followed). Read, never mapped:
    a mapped file cut short (`cp` over an installed library) would end warm with SIGBUS."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not 20 <= st.st_size <= _FOLLOW_LIMIT:
            return None
        head = os.pread(fd, 6, 0)
        bits, order = (64 if head[4:5] == b"\2" else 32), ("<" if head[5:6] == b"\1" else ">")
        read = _dynamic(
            lambda at, n: os.pread(fd, min(n, _READ_LIMIT), at), st.st_size, bits, order
        )
    except (OSError, ValueError, struct.error, OverflowError):
        return None
    finally:
        os.close(fd)
    if isinstance(read, str) or not read[0]:
        return None
    needed, rpath, runpath = read
    searched = _search_path(rpath, runpath, os.path.dirname(path), handed, probes)
    return None if isinstance(searched, str) else (needed, *searched)


def _dynamic(
    read: Callable[[int, int], bytes | memoryview], length: int, bits: int, order: str
) -> tuple[list[str], str, str] | str:
    """The `DT_NEEDED` names and the `DT_RPATH` and `DT_RUNPATH` of an ELF of `length`
    bytes, `read(at, n)` giving up to `n` of them from `at`, or why not servable."""
    dynamic = struct.Struct(order + elf.LAYOUTS[bits].dynamic)
    segments = elf.dynamic_segment(read, bits, order)
    if segments is None:
        return ([], "", "")  # no dynamic section: it needs nothing
    loads, found = segments
    tags: dict[int, int] = {}
    needed: list[int] = []
    start, size = found
    count = min(size // dynamic.size, MAX_DYNAMIC + 1)
    entries = read(start, count * dynamic.size)  # at most 1 MiB
    for i in range(count):
        tag, value = dynamic.unpack_from(entries, i * dynamic.size)
        if tag == _DT_NULL:
            break
        if i == MAX_DYNAMIC:
            return f"bundle's build has a dynamic section of over {MAX_DYNAMIC} entries: not read"
        if tag == _DT_NEEDED:
            if len(needed) == MAX_NEEDED:
                return f"bundle's build needs over {MAX_NEEDED} libraries: not read"
            needed.append(value)
        else:
            tags.setdefault(tag, value)
    if not needed and _DT_RPATH not in tags and _DT_RUNPATH not in tags:
        return ([], "", "")
    table = elf.file_offset(loads, tags.get(_DT_STRTAB, -1))
    if table is None:
        return ""  # no string table the loader could read: its own error stands
    end = min(length, table + tags.get(_DT_STRSZ, length))

    def text(at: int) -> str | None:
        held = bytes(read(table + at, max(0, min(end - table - at, MAX_NAME + 1))))
        stop = held.find(b"\0")
        return None if stop < 0 else held[:stop].decode(errors="surrogateescape")

    names = [text(n) for n in needed]
    paths = [text(tags[t]) if t in tags else "" for t in (_DT_RPATH, _DT_RUNPATH)]
    if None in names or None in paths:
        return f"bundle's build names a library or folder over {MAX_NAME} bytes, or unended"
    return ([n for n in names if n is not None], paths[0] or "", paths[1] or "")


def _search_path(
    rpath: str, runpath: str, origin: str, handed: list[str], probes: _Probes
) -> tuple[list[str], list[str]] | str:
    """The folders the loader searches for a name without a slash that an object with this
    `rpath` and `runpath`, loaded from `origin`, needs, in its order (the cache, between
    RUNPATH and the default folders, is looked up apart), and the RPATH it hands down to
    what it loads (its own with its loaders', `handed`, where it has no RUNPATH); or why not
    servable. A folder met before under another spelling (`/usr//lib`, a link to it) is
    searched once: what it holds was looked for there."""
    if max(rpath.count(":"), runpath.count(":")) >= MAX_FOLDERS:
        return f"bundle's build searches over {MAX_FOLDERS} folders for its libraries: not read"
    down = [] if runpath else [*_folders(rpath, origin), *handed]
    env = config.loader_path().replace(";", ":")  # LD_LIBRARY_PATH: glibc splits at both
    folders = [*down, *_folders(env, origin), *_folders(runpath, origin)]
    machine = platform.machine() or "x86_64"
    triplet = sysconfig.get_config_var("MULTIARCH") or f"{machine}-linux-gnu"
    for root in ("/lib", "/usr/lib"):
        folders.extend((f"{root}/{triplet}", f"{root}64", root))
    met: set[tuple[int, int]] = set()
    searched = []
    for folder in dict.fromkeys(folders):
        if (at := probes.folder(folder)) is not None and at not in met:
            met.add(at)
            searched.append(folder)
    return searched, down


def _folders(path: str, origin: str) -> list[str]:
    """A search path's folders, its tokens expanded (an empty one is the working folder)."""
    return [f for part in (path.split(":") if path else []) for f in _expanded(part or ".", origin)]


def _expanded(path: str, origin: str) -> list[str]:
    """`path` with the loader's tokens replaced: `$ORIGIN` by `origin`, the folder of the
    object that needs it, `$LIB` and `$PLATFORM` by each of their usual values."""
    if "$" not in path:
        return [path]
    machine = platform.machine() or "x86_64"
    triplet = sysconfig.get_config_var("MULTIARCH") or f"{machine}-linux-gnu"
    paths = [path]
    for token, values in (
        ("ORIGIN", (origin,)),
        ("LIB", ("lib", "lib64", f"lib/{triplet}")),
        ("PLATFORM", (machine,)),
    ):
        paths = [
            p.replace("${" + token + "}", v).replace("$" + token, v) for p in paths for v in values
        ]
    return list(dict.fromkeys(paths))


def _found(
    name: str,
    folders: list[str],
    cache: dict[str, list[str]] | None,
    ident: bytes,
    origin: str,
    probes: _Probes,
) -> str | None:
    """Where the loader finds `name` (None: nowhere; "": not known where, a cache it could
    not read, where it is assumed found: never a false "not servable")."""
    if "/" in name:  # (`origin`: the folder of the object that needs it)
        return next((p for p in _expanded(name, origin) if probes.fits(p, ident)), None)
    for folder in folders:
        if probes.fits(path := os.path.join(folder, name), ident):
            return path
    if cache is None:
        return ""
    return next((p for p in cache.get(name, ()) if probes.fits(p, ident)), None)


def _fits(path: str, ident: bytes) -> bool:
    """Whether `path` is a regular file the loader would take for a blob of `ident` (its
    word size, byte order and machine, and a shared object: the loader takes no
    executable or core file): read 20 bytes, never loaded. Only a regular file of an
    ELF header's bytes at least is opened (a device a hostile name gives, `/dev/watchdog`,
    never is, nor a procfs or tracing file, which says it holds 0: `/proc/kmsg`'s read
    takes the kernel's log from its reader)."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode) or st.st_size < elf.ELF32_HEADER:
            return False
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):  # none there (a NUL in a hostile name: ValueError)
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size < elf.ELF32_HEADER:
            return False
        head = os.pread(fd, 20, 0)
    except OSError:
        return False
    finally:
        os.close(fd)
    if len(head) < 20 or head[:4] != elf.MAGIC or head[4:6] + head[18:20] != ident:
        return False
    return int.from_bytes(head[16:18], "little" if head[5] == 1 else "big") == elf.ET_DYN


_cache_lock = threading.Lock()
renew_on_fork(sys.modules[__name__], "_cache_lock")  # a child forked while it was held
_cache_held: tuple[tuple[int, int, int], dict[str, list[str]] | None] | None = None


def _loader_cache() -> dict[str, list[str]] | None:
    """The loader cache's names and their paths ({} where there is none; None where it is
    in a form not read here), parsed again only when the file changed."""
    global _cache_held
    try:
        st = os.stat(_CACHE)
    except OSError:
        return {}
    stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
    with _cache_lock:
        if _cache_held is not None and _cache_held[0] == stamp:
            return _cache_held[1]
        parsed = _parse_cache() if st.st_size <= _CACHE_LIMIT else None
        _cache_held = (stamp, parsed)
        return parsed


def _parse_cache() -> dict[str, list[str]] | None:
    """glibc's cache (the new format, alone or after the old one): name -> paths."""
    try:
        with open(_CACHE, "rb") as file:
            data = file.read(_CACHE_LIMIT + 1)
    except OSError:
        return {}
    base = data.find(_CACHE_MAGIC)
    if base < 0 or len(data) < base + 48:
        return None
    (count,) = struct.unpack_from("=I", data, base + 20)
    entry = struct.Struct("=iII4x8x")
    if base + 48 + count * entry.size > len(data):
        return None
    names: dict[str, list[str]] = {}

    def text(at: int) -> str:
        stop = data.find(b"\0", base + at)
        return data[base + at : stop if stop >= 0 else len(data)].decode(errors="surrogateescape")

    for i in range(count):
        _, key, value = entry.unpack_from(data, base + 48 + i * entry.size)
        names.setdefault(text(key), []).append(text(value))
    return names
