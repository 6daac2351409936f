"""A host kernel binary's ELF headers, checked against this machine without loading it.

A bundle's blob matching its sha256 says only that it is the blob the bundle names:
one built for another machine (another `e_machine`, word size or byte order) passes,
and so does one that is no shared object (an executable, an object file) or one cut
short (a header whose program headers or segments lie past its end): the loader
refuses each, so a production process compiles the kernel after all.
`foreign_binary` says so from the ELF header and its program headers, for `warm
check`'s preflight (`warmcli.ops.check`). It owns no state, loads nothing and never
prints.
"""

from __future__ import annotations

import platform
import struct
import sys

_ELF = b"\x7fELF"
_ET_DYN = 3  # e_type of a shared object
_PT_LOAD = 1
# `platform.machine()` -> ELF e_machine of the shared objects its loader takes.
_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "ppc64le": 21,
             "ppc64": 21, "s390x": 22, "riscv64": 243, "i386": 3, "i686": 3}  # fmt: skip
# By word size: the header's e_phoff, e_phentsize and e_phnum (their offsets and formats),
# the header's length, and a program header's p_type, p_offset and p_filesz.
_LAYOUT = {
    64: (32, "Q", 54, 64, "I4xQ16xQ"),
    32: (28, "I", 42, 52, "II8xI"),
}


def foreign_binary(data: bytes) -> str:
    """Why this machine's loader would refuse `data`, a host kernel binary, from its ELF
    headers ("" where it would not, or where this machine loads no ELF)."""
    if platform.system() != "Linux":
        return ""
    if data[:4] != _ELF or len(data) < 20 or data[4] not in (1, 2) or data[5] not in (1, 2):
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
    if e_type != _ET_DYN:
        return f"bundle's build is not a shared object (an ELF of e_type {e_type})"
    return _cut_short(data, bits, "<" if order == "little" else ">")


def _cut_short(data: bytes, bits: int, order: str) -> str:
    """Why the loader would find `data`'s program headers or segments past its end ("")."""
    at, offset, sizes, header, entry = _LAYOUT[bits]
    if len(data) < header:
        return f"bundle's build is cut short: {len(data)} bytes, less than its ELF header"
    (phoff,) = struct.unpack_from(order + offset, data, at)
    phentsize, phnum = struct.unpack_from(order + "HH", data, sizes)
    program = struct.Struct(order + entry)
    if phnum == 0 or phentsize < program.size or phoff + phentsize * phnum > len(data):
        return f"bundle's build is cut short: {len(data)} bytes, its program headers past them"
    for i in range(phnum):
        kind, start, size = program.unpack_from(data, phoff + i * phentsize)
        if kind == _PT_LOAD and start + size > len(data):
            return f"bundle's build is cut short: {len(data)} bytes, a segment past them"
    return ""
