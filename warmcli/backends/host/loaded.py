"""The shared objects this process has loaded, by the names glibc's loader matches a needed
name against before it searches any folder: their `DT_SONAME`s.

A `DT_NEEDED` name that an object already loaded answers to is that object: the loader
searches no folder for it (`warmcli.backends.host.needed`, whose search covers only the
folders). Every warm process imports Python's own libraries and numpy's, which a wheel
keeps in a folder of its own (`numpy.libs`) that no search path names; a blob needing one
of them loads in production. The loader matches a name against the path an object was
opened by, the name it was asked for and its `DT_SONAME`, never against its file's name: a
Python extension module (`_sqlite3.cpython-311-x86_64-linux-gnu.so`, opened by its whole
path, with no `DT_SONAME`) answers to no bare name, and a process needing it by its file's
name fails to load. `loaded_names` gives the `DT_SONAME` of each file this process has mapped
executable (`/proc/self/maps`), read from the file's headers (never mapped again; each
file's kept by its device, inode and path, `_HELD` at most): a name a production process of
the same Python has loaded too. Only the kept names are its state; it loads nothing and
never prints.
"""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Callable

from warmcli.backends.host import elf

_DT_NULL, _DT_STRTAB, _DT_SONAME = 0, 5, 14
_HELD = 4096  # mapped files whose DT_SONAME is kept (past it, all are read again)
_READ_LIMIT = 1 << 20  # the most one read of a mapped file's headers takes
_sonames: dict[bytes, str | None] = {}  # "device inode path" of /proc/self/maps -> DT_SONAME


def loaded_names() -> frozenset[str]:
    """The `DT_SONAME`s of the shared objects this process has loaded (an executable mapping
    of a file still there), decoded as `needed` decodes a needed name; none where
    `/proc/self/maps` cannot be read (another OS)."""
    try:
        with open("/proc/self/maps", "rb") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return frozenset()
    names = set()
    for line in lines:
        fields = line.split(maxsplit=5)
        path = fields[5] if len(fields) == 6 and b"x" in fields[1] else b""
        if not path.startswith(b"/") or path.endswith(b" (deleted)"):
            continue
        held = b" ".join(fields[3:])
        if held not in _sonames:
            if len(_sonames) >= _HELD:
                _sonames.clear()
            _sonames[held] = _soname(os.fsdecode(path))
        if (name := _sonames[held]) is not None:
            names.add(name)
    return frozenset(names)


def _soname(path: str) -> str | None:
    """The `DT_SONAME` of the ELF shared object at `path`, read (never mapped); None where it
    has none or it cannot be read. Only a regular file is opened (a device mapped executable,
    a GPU driver's, is never: opening some has effects)."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except (OSError, ValueError):
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        head = os.pread(fd, elf.ELF32_HEADER, 0)
        if len(head) < elf.ELF32_HEADER or head[:4] != elf.MAGIC:
            return None
        return _read_soname(lambda at, n: os.pread(fd, min(n, _READ_LIMIT), at), head)
    except (OSError, ValueError, struct.error, OverflowError):
        return None
    finally:
        os.close(fd)


def _read_soname(read: Callable[[int, int], bytes], head: bytes) -> str | None:
    """The `DT_SONAME` of the ELF whose first bytes are `head`, `read(at, n)` giving up to
    `n` of its bytes from `at`: found as the loader finds its dynamic section."""
    bits, order = elf.word_and_order(head)
    dynamic = struct.Struct(order + elf.LAYOUTS[bits].dynamic)
    segments = elf.dynamic_segment(read, bits, order)
    if segments is None:
        return None
    loads, found = segments
    entries = read(found[0], found[1])
    tags: dict[int, int] = {}
    for i in range(len(entries) // dynamic.size):
        tag, value = dynamic.unpack_from(entries, i * dynamic.size)
        if tag == _DT_NULL:
            break
        tags.setdefault(tag, value)
    if _DT_SONAME not in tags or _DT_STRTAB not in tags:
        return None
    table = elf.file_offset(loads, tags[_DT_STRTAB])
    if table is None:
        return None
    held = bytes(read(table + tags[_DT_SONAME], 4097))
    stop = held.find(b"\0")
    return None if stop <= 0 else held[:stop].decode(errors="surrogateescape")
