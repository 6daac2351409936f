"""Reading a cubin: the ELF nvcc writes, checked before anything loads it.

A cubin is a little-endian 64-bit ELF with e_machine 190 (EM_CUDA). Its SM number
sits in e_flags: bits 8-15 for ELF ABI version 8 (e_ident[8], what nvcc 13.5
writes here: sm_80 → 0x50, sm_90 and sm_90a → 0x5a, sm_100 → 0x64), bits 0-7
for older ABI versions (older toolchains' layout, not checked here). The `a`
suffix is not in e_flags, so sm_90a and sm_90 cubins read alike. Kernel entries are the
symbols of type STT_FUNC marked STO_CUDA_ENTRY (0x10 in st_other); `__device__`
helpers are local functions without that mark; `__device__`/`__constant__`
variables are STT_OBJECT symbols. A cubin can come from an
untrusted bundle, so every offset is bounds-checked and any malformed input is a
`CubinError`; `check_cubin` also checks that the header's section and program header
tables lie within the file (a cubin cut short, or a header alone, is refused: its length
is all it needs beside the header, so a blob's first bytes and its SQL `length()` judge
it as the whole would). Pure Python, no state, nothing is executed.

Why not pyelftools: measured, `import elftools.elf.elffile` takes about 31 ms, and a
cubin's header is checked on every load at serve time (three fields here, about a
microsecond); and pyelftools decodes `st_other` into visibility and `local` bits only,
dropping STO_CUDA_ENTRY (0x10), the one bit that tells an entry from a `__device__`
helper. The symbol walk below is the 40 lines it would have replaced.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from warmcli.errors import CubinError
from warmcli.printable import Pattern

EM_CUDA = 190
SHT_SYMTAB = 2
STT_OBJECT = 1
STT_FUNC = 2
STO_CUDA_ENTRY = 0x10
_ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_SYMBOL = struct.Struct("<IBBHQQ")
_PROGRAM_HEADER_BYTES = 56  # an ELF64 program header's
_ARCH = Pattern(r"sm_([0-9]{2,3})[af]?")  # what `check_cubin` takes (`sm_90`, `sm_90a`)


@dataclass(frozen=True)
class _Section:
    name: int
    type: int
    offset: int
    size: int
    link: int
    entsize: int


def _unpack(fmt: struct.Struct, data: bytes, offset: int) -> tuple[int, ...]:
    if offset < 0 or offset + fmt.size > len(data):
        raise CubinError(f"cubin truncated: need {fmt.size} bytes at offset {offset}")
    return fmt.unpack_from(data, offset)


def _header(data: bytes) -> tuple[int, ...]:
    if data[:4] != b"\x7fELF":
        raise CubinError("not a cubin: no ELF magic (is it PTX or a fatbin?)")
    if len(data) < _ELF_HEADER.size or data[4] != 2 or data[5] != 1:
        raise CubinError("not a cubin: expected a little-endian 64-bit ELF")
    header = _unpack(_ELF_HEADER, data, 0)
    if header[2] != EM_CUDA:
        raise CubinError(f"not a cubin: ELF e_machine is {header[2]}, not {EM_CUDA} (EM_CUDA)")
    return header


def cubin_sm(data: bytes) -> int:
    """The SM number a cubin was built for (90 for sm_90 and sm_90a)."""
    return _sm(_header(data))


def _sm(header: tuple[int, ...]) -> int:
    """The SM number an ELF header (`_header`'s) of a cubin names."""
    ident, *_, flags = header[:8]
    abi_version = ident[8]
    return (flags >> 8) & 0xFF if abi_version >= 8 else flags & 0xFF


def check_cubin(data: bytes, arch: str, length: int | None = None) -> None:
    """Raise CubinError unless `data` is a cubin for `arch` (`sm_90a` matches an sm_90 cubin)
    whose header's tables lie within its `length` bytes (`len(data)` unless given: `data`
    may then be its first bytes only, an ELF header's worth)."""
    want = _ARCH.fullmatch(arch)  # ASCII digits: `int` refuses '²', which isdigit() takes
    if want is None:
        raise CubinError(f"{arch!r} is not an sm_XX architecture")
    header = _header(data)  # read once: the SM, then its tables
    got = _sm(header)
    if got != int(want.group(1)):
        raise CubinError(f"cubin is for sm_{got}, not {arch}")
    _within(header, len(data) if length is None else length)


def _within(header: tuple[int, ...], length: int) -> None:
    """CubinError unless the ELF header's tables (sections, program headers) are of sane
    entry sizes and counts and lie within a file of `length` bytes."""
    phoff, shoff = header[5], header[6]
    ehsize, phentsize, phnum, shentsize, shnum, shstrndx = header[8:14]
    if ehsize != _ELF_HEADER.size:
        raise CubinError(f"not a cubin: its ELF header says {ehsize} bytes, not {_ELF_HEADER.size}")
    if shnum == 0 or shentsize != _SECTION.size or shstrndx >= shnum:
        raise CubinError(
            f"cubin section table is malformed: {shnum} section(s) of {shentsize} bytes, "
            f"names in section {shstrndx}"
        )
    tables = [("section table", shoff, shnum * shentsize)]
    if phnum:
        if phentsize != _PROGRAM_HEADER_BYTES:
            want = _PROGRAM_HEADER_BYTES
            raise CubinError(f"cubin program headers are {phentsize} bytes, not {want}")
        tables.append(("program headers", phoff, phnum * phentsize))
    for what, offset, size in tables:
        if offset < _ELF_HEADER.size or offset + size > length:
            raise CubinError(
                f"cubin truncated: its {what} ({size} bytes at offset {offset}) "
                f"lies past its end ({length} bytes)"
            )


def _sections(data: bytes) -> list[_Section]:
    header = _header(data)
    shoff, shentsize, shnum = header[6], header[11], header[12]
    if shentsize != _SECTION.size:
        raise CubinError(f"cubin section headers are {shentsize} bytes, not {_SECTION.size}")
    out = []
    for i in range(shnum):
        name, typ, _f, _a, offset, size, link, _i, _al, entsize = _unpack(
            _SECTION, data, shoff + i * _SECTION.size
        )
        if offset + size > len(data) and typ != 8:  # SHT_NOBITS occupies no bytes
            raise CubinError(f"cubin section {i} runs past the end of the file")
        out.append(_Section(name, typ, offset, size, link, entsize))
    return out


def _string(data: bytes, table: _Section, index: int) -> str:
    if index >= table.size:
        raise CubinError("cubin string index out of range")
    start = table.offset + index
    end = data.find(b"\0", start, table.offset + table.size)
    if end < 0:
        raise CubinError("cubin string not terminated")
    return data[start:end].decode("utf-8", "replace")


def _symbols(data: bytes) -> list[tuple[str, int, int, int]]:
    """Every symbol of a cubin as (name, st_info, st_other, st_size)."""
    sections = _sections(data)
    found: list[tuple[str, int, int, int]] = []
    for symtab in (s for s in sections if s.type == SHT_SYMTAB):
        if symtab.entsize != _SYMBOL.size or symtab.link >= len(sections):
            raise CubinError("cubin symbol table is malformed")
        strtab = sections[symtab.link]
        for off in range(symtab.offset, symtab.offset + symtab.size, _SYMBOL.size):
            name, info, other, _shndx, _value, size = _unpack(_SYMBOL, data, off)
            found.append((_string(data, strtab, name), info, other, size))
    return found


def cubin_functions(data: bytes) -> set[str]:
    """The kernel entry symbols in a cubin (what `module.get_function` can find)."""
    return {
        name
        for name, info, other, _ in _symbols(data)
        if info & 0xF == STT_FUNC and other & STO_CUDA_ENTRY
    }


def cubin_globals(data: bytes) -> dict[str, int]:
    """The data symbols of a cubin (`__device__`, `__constant__` variables) and their sizes:
    what `module.get_global` can find."""
    return {name: size for name, info, _, size in _symbols(data) if info & 0xF == STT_OBJECT}
