"""ELF shared objects built by hand for the tests of `warmcli.backends.host.needed`: a
bundle's host blob as a hostile (or a plain) linker would leave it, never loaded."""

from __future__ import annotations

import struct


def shared_object(needed: list[bytes], runpath: bytes = b"", count: int | None = None) -> bytes:
    """A 64-bit little-endian shared object's headers and dynamic section, by hand: a
    `PT_LOAD` over the whole file and a `PT_DYNAMIC` of `needed` (repeated `count` times)."""
    names = b"\0" + b"".join(n + b"\0" for n in needed) + runpath + b"\0"
    offsets = [1 + sum(len(n) + 1 for n in needed[:i]) for i in range(len(needed))]
    entries = [(1, o) for o in offsets] * ((count or len(needed)) // max(len(needed), 1))
    entries += [(29, len(names) - len(runpath) - 1)] if runpath else []
    dynamic_at = 64 + 2 * 56
    strtab_at = dynamic_at + (len(entries) + 3) * 16
    entries += [(5, strtab_at), (10, len(names)), (0, 0)]
    dynamic = b"".join(struct.pack("<qQ", *e) for e in entries)
    size = strtab_at + len(names)
    header = b"\x7fELF\x02\x01\x01" + bytes(9)
    header += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 64, 0, 0, 64, 56, 2, 64, 0, 0)
    load = struct.pack("<IIQQQQQQ", 1, 4, 0, 0, 0, size, size, 4096)
    dyn = struct.pack("<IIQQQQQQ", 2, 6, dynamic_at, dynamic_at, 0, len(dynamic), len(dynamic), 8)
    return header + load + dyn + dynamic + names
