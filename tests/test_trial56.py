"""Trial 56: a new user's and an attacker's tries at warm, from the README.

A host kernel whose assembly reads a file (`.incbin`) is never served: its key cannot hold that
file. warm refused such a directive only where its kernel's own source spelled it whole, so a
header in an include folder that reads one (as the `incbin.h` helpers do) was keyed, stored and
served after its data file changed, and a source splitting it across string literals the
compiler joins (`".inc" "bin ..."`) was too. Real parts: the real CLI warms with the real cc,
a real production process serves (each a fork of a process that imported warm once,
`tests/forked_cli.py`: what they store and compute is tested, not how they start).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import Warm, nvrtc_release_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# A kernel reading a 32-bit value its assembly takes from `table.bin` (its source: `k.c`).
WORKLOAD = """
import os
from warmcli import Kernel
DEVICE = "host"
HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "k.c")) as f:
    SOURCE = f.read().replace("TABLE", os.path.join(HERE, "table.bin"))
K = Kernel(SOURCE, "k", "P", options=("-I" + os.path.join(HERE, "inc"),))
def workload(rt):
    y = rt.buffer(1, "int32")
    rt.launch(K, y)
    return [y]
"""
SERVE = """
import json, runpy, sys, warmcli
rt = warmcli.runtime("host")
print(json.dumps([int(rt.read(y)[0]) for y in runpy.run_path(sys.argv[1])["workload"](rt)]))
"""
# A header after `incbin.h`: the directive in a macro, its file named by the kernel's source.
INCBIN_H = r"""
#define INCBIN(sym, file) \
    __asm__(".section .rodata\n.globl " #sym "\n" #sym ":\n.incbin \"" file "\"\n.text\n")
"""
READ = "extern const int tab[];\nvoid k(int *y) { y[0] = tab[0]; }\n"
IN_HEADER = '#include "incbin.h"\nINCBIN(tab, "TABLE");\n' + READ
SPLIT = r'__asm__(".section .rodata\n.globl tab\ntab:\n.inc" "bin \"TABLE\"\n.text\n");'
SPLIT += "\n" + READ


def _tree(tmp_path: Path, workload_file, kernel: str) -> Path:
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "incbin.h").write_text(INCBIN_H)
    (tmp_path / "k.c").write_text(kernel)
    (tmp_path / "table.bin").write_bytes((7).to_bytes(4, "little"))
    return workload_file(WORKLOAD)


def _warmed(warm: Warm, tmp_path: Path, workload_file, kernel: str) -> tuple[Path, Path, Any]:
    """The workload reading `kernel` with table.bin holding 7, its `warm run` into b.warm."""
    path, bundle = _tree(tmp_path, workload_file, kernel), tmp_path / "b.warm"
    return path, bundle, warm("run", path, "-b", bundle)


def test_a_header_whose_assembly_reads_a_file_is_never_served_its_old_build(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """Before: the bundle served 7 after table.bin was made 9, where a cold start computed 9."""
    path, bundle, run = _warmed(warm, tmp_path, workload_file, IN_HEADER)
    assert run.returncode == 0, run.stderr + run.stdout
    (tmp_path / "table.bin").write_bytes((9).to_bytes(4, "little"))
    assert warm.production(SERVE, path) == [9]  # a cold start
    assert warm.production(SERVE, path, bundle=bundle) == [9]  # was [7]
    assert "never served (a header's assembly reads a file" in run.stdout, run.stdout


def test_a_source_splitting_an_incbin_across_joined_literals_is_refused(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """Before: `".inc" "bin ..."` was not seen: stored, and served 7 after table.bin was 9."""
    _, _, run = _warmed(warm, tmp_path, workload_file, SPLIT)
    assert run.returncode == 2, run.stderr + run.stdout
    assert "its assembly reads a file (.incbin, .include)" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr


def test_the_directive_is_found_as_the_compiler_joins_literals_not_in_comments() -> None:
    from warmcli.directives import reads_assembler_file  # (new in trial 56)

    assert reads_assembler_file(b'__asm__(".inc" /* a */ "bin \\"t.bin\\"");')
    assert reads_assembler_file(b'__asm__(".in\\\n" "cludE \\"x.s\\"");')  # a line splice
    assert reads_assembler_file(b'#define I(f) __asm__(".incbin \\"" f "\\"")')
    assert not reads_assembler_file(b'// .incbin "t.bin"\nint a;')
    assert not reads_assembler_file(b'const char *s = ".inc"; int b = 1; char *t = "bin \\"x\\"";')
    assert not reads_assembler_file(b"char q = '\"'; int n = 1'000; /* .incbin \"t\" */")


# A CUDA kernel including the same header (its `INCBIN` unused): a cubin is never assembled by
# the host's assembler, so the header's directive reads nothing there.
CUDA_WORKLOAD = """
import os
from warmcli import Kernel
DEVICE = "cuda"
HERE = os.path.dirname(os.path.abspath(__file__))
K = Kernel('#include "incbin.h"\\nextern "C" __global__ void k(int *y) { y[0] = 7; }', "k", "P",
           language="cuda", options=("-I" + os.path.join(HERE, "inc"),))
def workload(rt):
    rt.launch(K, rt.buffer(1, "int32"), grid=(1, 1, 1), block=(1, 1, 1))
"""


def test_a_cuda_kernel_including_such_a_header_is_still_stored_and_served(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    nvrtc_release_or_skip()
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "incbin.h").write_text(INCBIN_H)
    doc = warm.json(
        "run", workload_file(CUDA_WORKLOAD), "--arch", "sm_90", "-b", tmp_path / "c.warm"
    )
    assert doc["stored"]["kernels"] == 2 and doc["verified"] is True, doc  # its cubin and PTX
    assert not doc.get("never_served"), doc
