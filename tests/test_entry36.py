"""A host kernel's entry whose declaration leaves its arguments unchecked is refused, named.

Real `warm run` in a subprocess with the real cc: a variadic entry (`void put(double *o,
...)`) given letters `Pf` compiled, and ctypes passed its float unpromoted where the entry
read a double (`va_arg(ap, double)`): 2.5 was written as 4.66e-310, cold, warmed and served
alike, silently. It now fails
its compile with one line that says why, as an old-style (K&R) entry does.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm

WORKLOAD = r'''
from warmcli import Kernel
DEVICE = "host"
SOURCE = """
#include <stdarg.h>
void put(double *o, ...) { va_list ap; va_start(ap, o); o[0] = va_arg(ap, double); va_end(ap); }
"""
K = Kernel(SOURCE, "put", "Pf")
def workload(rt):
    o = rt.buffer(1, "float64")
    rt.launch(K, o, 2.5)
'''


def test_a_variadic_entry_fails_its_compile_named(warm: Warm, tmp_path: Path) -> None:
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    done = warm("run", workload, "-b", bundle, "-q", "--allow-discarded-reads")
    assert done.returncode == 2, done.stderr
    assert "is variadic" in done.stderr and "Traceback" not in done.stderr, done.stderr
