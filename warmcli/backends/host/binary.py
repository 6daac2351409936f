"""A host kernel binary's ELF header, checked against this machine without loading it.

A bundle's blob matching its sha256 says only that it is the blob the bundle names:
one built for another machine (another `e_machine`, word size or byte order) passes,
and the loader refuses it, so a production process compiles the kernel after all.
`foreign_binary` says so from the header's first 20 bytes, for `warm check`'s preflight
(`warmcli.ops.check`). It owns no state, loads nothing and never prints.
"""

from __future__ import annotations

import platform
import sys

_ELF = b"\x7fELF"
# `platform.machine()` -> ELF e_machine of the shared objects its loader takes.
_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "ppc64le": 21,
             "ppc64": 21, "s390x": 22, "riscv64": 243, "i386": 3, "i686": 3}  # fmt: skip


def foreign_binary(data: bytes) -> str:
    """Why this machine's loader would refuse `data`, a host kernel binary, from its ELF
    header ("" where it would not, or where this machine loads no ELF)."""
    if platform.system() != "Linux":
        return ""
    if data[:4] != _ELF or len(data) < 20:
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
    return ""
