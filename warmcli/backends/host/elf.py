"""ELF's layout, as warm's host readers read a binary's headers without loading it.

`LAYOUTS` gives, per word size (32 or 64 bits), where the ELF header holds the program and
section header tables (their offset's place and format, the place of their entry size and
count) and the struct formats of the entries read: a program header as
`warmcli.backends.host.binary` checks it (`segment`) and as `warmcli.backends.host.needed`
follows it to the dynamic section (`mapped`), a dynamic entry, a section header and a dynamic
symbol. `word_and_order` reads an ELF's word size and byte order (a `struct` prefix) from its
identification bytes, `program_table` the program header table's offset, entry size and count,
`dynamic_segment` the loaded segments and the dynamic section as the loader finds them, and
`file_offset` where a loaded address lies in the file. One table for both readers: they read
one layout. It owns no state and never reads a file but through the `read` it is given.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

MAGIC = b"\x7fELF"
ET_DYN = 3  # e_type of a shared object
PT_LOAD, PT_DYNAMIC = 1, 2  # p_type of a loaded segment, of the dynamic section's
SHT_DYNSYM = 11  # sh_type of the dynamic symbol table
ELF32_HEADER = 52  # the shortest ELF header's length (a 32-bit one)


class Layout(NamedTuple):
    """One word size's places (byte offsets in the ELF header) and formats (`struct`'s,
    without the byte order's prefix)."""

    phoff: int  # e_phoff's place
    word: str  # the format of e_phoff and e_shoff
    sizes: int  # e_phentsize and e_phnum's place (e_shentsize and e_shnum follow)
    header: int  # the ELF header's length
    segment: str  # a program header's p_type, p_offset and p_filesz
    mapped: str  # a program header whole: its p_type, p_offset, p_vaddr and p_filesz
    dynamic: str  # a dynamic entry's d_tag and d_val
    shoff: int  # e_shoff's place
    section: str  # a section header's sh_type, sh_offset, sh_size, sh_link and sh_entsize
    symbol: str  # a symbol's st_name, st_info, st_other and st_shndx


LAYOUTS = {
    64: Layout(32, "Q", 54, 64, "I4xQ16xQ", "I4xQQ8xQ8x8x", "qQ", 40, "4xI16xQQI12xQ", "IBBH16x"),
    32: Layout(28, "I", 42, 52, "II8xI", "III4xI8x4x", "iI", 32, "4xI8xIII8xI", "I8xBBH"),
}


def word_and_order(data: bytes | memoryview) -> tuple[int, str]:
    """An ELF's word size (64 where its EI_CLASS says so, else 32) and byte order, as the
    prefix `struct` takes ("<" where its EI_DATA says little-endian, else ">")."""
    return (64 if data[4] == 2 else 32), ("<" if data[5] == 1 else ">")


def program_table(
    read: Callable[[int, int], bytes | memoryview], bits: int, order: str
) -> tuple[int, int, int]:
    """The program header table's offset, entry size and entry count of an ELF of `bits`
    and `order`, `read(at, n)` giving up to `n` of its bytes from `at` (`struct.error`
    where they are past its end)."""
    layout = LAYOUTS[bits]
    (phoff,) = struct.unpack_from(order + layout.word, read(layout.phoff, 8), 0)
    phentsize, phnum = struct.unpack_from(order + "HH", read(layout.sizes, 4), 0)
    return phoff, phentsize, phnum


Segment = tuple[int, int, int]  # a loaded segment's address, file offset and size in the file


def dynamic_segment(
    read: Callable[[int, int], bytes | memoryview], bits: int, order: str
) -> tuple[list[Segment], tuple[int, int]] | None:
    """The loaded segments of an ELF of `bits` and `order` and its first dynamic section's
    file offset and size, found as the loader finds them (`read` as `program_table`'s: the
    program headers in one read); None where it has no dynamic section (or program headers
    shorter than one)."""
    phoff, phentsize, phnum = program_table(read, bits, order)
    program = struct.Struct(order + LAYOUTS[bits].mapped)
    if phentsize < program.size:
        return None
    headers = read(phoff, phnum * phentsize)  # (a library's: 4 MiB at most)
    loads: list[Segment] = []
    found = None
    for i in range(phnum):  # at most 65,535, each read once
        kind, start, address, size = program.unpack_from(headers, i * phentsize)
        if kind == PT_LOAD:
            loads.append((address, start, size))
        elif kind == PT_DYNAMIC and found is None:
            found = (start, size)
    return None if found is None else (loads, found)


def file_offset(loads: list[Segment], address: int) -> int | None:
    """Where `address` lies in the file, by the loaded segment holding it; None where none."""
    return next((s + address - a for a, s, n in loads if a <= address < a + n), None)
