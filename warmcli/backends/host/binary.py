"""A host kernel binary's ELF headers, checked against this machine without loading it.

A bundle's blob matching its sha256 says only that it is the blob the bundle names:
one built for another machine (another `e_machine`, word size or byte order) passes,
and so does one that is no shared object (an executable, an object file) or one cut
short (a header whose program headers or segments lie past its end): the loader
refuses each, so a production process compiles the kernel after all.
`foreign_binary` says so from the ELF header and its program headers, and `unloadable`
adds a library it needs that this machine's loader does not find
(`warmcli.backends.host.needed`), for `warm check`'s preflight (`warmcli.ops.check`);
`exported_symbols` reads the names its
dynamic symbol table exports (what `dlsym` finds), so a row naming a symbol the binary
lacks is found there too, not when a production process serves it (pyelftools is no
dependency of warm: a small reader of `warmcli.backends.host.elf`'s layout, bounded by the
binary's size, in time and memory: a table whose names overlap more than a linker's shared
tails do is not read). It owns no state, loads nothing and never prints.
"""

from __future__ import annotations

import platform
import struct
import sys

from warmcli.backends.host.elf import (
    ET_DYN,
    LAYOUTS,
    MAGIC,
    PT_LOAD,
    SHT_DYNSYM,
    program_table,
    word_and_order,
)
from warmcli.backends.host.needed import missing_library

_MAX_SYMBOLS = 1 << 20  # a dynamic symbol table longer than this is not read
_NAMES_READ = 4  # the names read total at most this many times their table's size
# `platform.machine()` -> ELF e_machine of the shared objects its loader takes.
_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "ppc64le": 21,
             "ppc64": 21, "s390x": 22, "riscv64": 243, "i386": 3, "i686": 3}  # fmt: skip


def foreign_binary(data: bytes) -> str:
    """Why this machine's loader would refuse `data`, a host kernel binary, from its ELF
    headers ("" where it would not, or where this machine loads no ELF)."""
    if platform.system() != "Linux":
        return ""
    if data[:4] != MAGIC or len(data) < 20 or data[4] not in (1, 2) or data[5] not in (1, 2):
        return "bundle's build is not an ELF shared object"
    bits, order = (64 if data[4] == 2 else 32), ("little" if data[5] == 1 else "big")
    machine = int.from_bytes(data[18:20], order)
    expected = _MACHINES.get(platform.machine().lower())
    here = (64 if sys.maxsize > 2**32 else 32, sys.byteorder, expected)
    if (bits, order, machine if expected is not None else None) != here:
        return (
            f"bundle's build is for another machine: a {bits}-bit {order}-endian ELF of "
            f"e_machine {machine}; {platform.machine()} loads {here[0]}-bit {here[1]}-endian"
            + (f" ELF of e_machine {expected}" if expected is not None else " ELF")
        )
    e_type = int.from_bytes(data[16:18], order)
    if e_type != ET_DYN:
        return f"bundle's build is not a shared object (an ELF of e_type {e_type})"
    return _cut_short(data, bits, "<" if order == "little" else ">")


def unloadable(data: bytes) -> str:
    """Why this machine's loader would not load `data`, a host kernel binary, from its
    bytes alone, never loaded: `foreign_binary`, else a library it needs that the loader
    does not find (`missing_library`); "" where neither."""
    return foreign_binary(data) or missing_library(data)


def _cut_short(data: bytes, bits: int, order: str) -> str:
    """Why the loader would find `data`'s program headers or segments past its end ("")."""
    layout = LAYOUTS[bits]
    if len(data) < layout.header:
        return f"bundle's build is cut short: {len(data)} bytes, less than its ELF header"
    phoff, phentsize, phnum = program_table(lambda at, n: data[at : at + n], bits, order)
    program = struct.Struct(order + layout.segment)
    if phnum == 0 or phentsize < program.size or phoff + phentsize * phnum > len(data):
        return f"bundle's build is cut short: {len(data)} bytes, its program headers past them"
    for i in range(phnum):
        kind, start, size = program.unpack_from(data, phoff + i * phentsize)
        if kind == PT_LOAD and start + size > len(data):
            return f"bundle's build is cut short: {len(data)} bytes, a segment past them"
    return ""


def exported_symbols(data: bytes) -> frozenset[str] | None:
    """The names a shared object's dynamic symbol table defines for `dlsym` (global or weak,
    not hidden), from its section headers; None where that cannot be read (no ELF of this
    machine's byte order and word size, no section headers, a table past its end)."""
    if data[:4] != MAGIC or len(data) < 64 or data[4] not in (1, 2) or data[5] not in (1, 2):
        return None
    bits, order = word_and_order(data)
    layout = LAYOUTS[bits]
    (shoff,) = struct.unpack_from(order + layout.word, data, layout.shoff)
    shentsize, shnum = struct.unpack_from(order + "HH", data, layout.sizes + 4)
    header, entry = struct.Struct(order + layout.section), struct.Struct(order + layout.symbol)
    if shnum == 0 or shentsize < header.size or shoff + shentsize * shnum > len(data):
        return None
    sections = [header.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    for kind, start, size, link, entsize in sections:
        if kind != SHT_DYNSYM:
            continue
        if entsize < entry.size or start + size > len(data) or link >= shnum:
            return None
        _, names, names_size, _, _ = sections[link]
        if names + names_size > len(data) or size // entsize > _MAX_SYMBOLS:
            return None
        found: set[str] = set()
        last = data.rfind(b"\0", names, names + names_size)  # a name past it is unterminated
        budget = _NAMES_READ * names_size  # names overlap in a table (a shared tail), not more
        for i in range(1, size // entsize):  # the first is the null symbol
            name, info, other, shndx = entry.unpack_from(data, start + i * entsize)
            if shndx == 0 or (info >> 4) not in (1, 2, 10) or other & 3 in (1, 2):
                continue  # undefined; local; internal or hidden
            if names + name <= last:
                end = data.find(b"\0", names + name, last + 1)
                budget -= end - names - name
                if budget < 0:  # runs of the table named again and again: not a linker's
                    return None
                found.add(data[names + name : end].decode(errors="replace"))
        return frozenset(found)
    return frozenset()
