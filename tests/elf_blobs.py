"""ELF shared objects built by hand for the tests of `warmcli.backends.host.needed`: a
bundle's host blob as a hostile (or a plain) linker would leave it, never loaded; and the
host workload those tests link against a library of their own (`LINKED_WORKLOAD`, its
`LIBDIR` and `LIBNAME` replaced), with the production script that serves it (`SERVE`)."""

from __future__ import annotations

import struct

LINKED_WORKLOAD = """
import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel('''
void scale(float *x, int n) { for (int i = 0; i < n; i++) x[i] = 2.0f * x[i]; }
''', "scale", "Pi", options=("-LLIBDIR", "-Wl,--no-as-needed", "-l:LIBNAME"))
def workload(rt):
    x = rt.upload(np.arange(8, dtype=np.float32))
    rt.launch(K, x, 8)
    return x
"""
SERVE = """
import runpy, sys, warmcli
m = runpy.run_path(sys.argv[1])
rt = warmcli.runtime("host")
print(rt.read(m["workload"](rt)).tolist())
"""


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
