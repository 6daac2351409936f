"""Review of round 29's renaming of tags, enumerators and typedef names in shared C units.

A kernel compiled in a batch must compile and compute exactly as alone. Bugs it found:
- a typedef name or enumerator spelt through a macro (the source's `#define MYINT myint`,
  or a kernel define `T=myint`) was not renamed (the macro undid warm's renaming), so a
  later kernel in the unit used it where alone it does not compile: such a kernel is
  compiled in a unit of its own now;
- a struct tag spelt inside a directive (`#define VEC struct vec`) was not read, so two
  kernels that both spell it there shared one tag: tags in directives are read now;
- a typedef name split by a line splice was read from the unspliced text, so warm renamed
  `int` and a valid kernel failed to compile: names are read from the spliced text;
- a name after a comma inside an enumerator's value (`MAX(2, sizeof(double))`,
  `_Generic(x, float: 4, ...)`) was read as an enumerator: `sizeof`, `float` renamed, a
  valid kernel failed to compile; only an enum body's top level is read now;
- a function taking an enum (`int f(enum e v) { return ...; }`) had its body read as an
  enum's: `return` renamed, a valid kernel failed to compile; only `enum [tag] {` opens
  an enum body now;
- a prototype of a function the source does not define (`double sqrt(double);`, no
  `<math.h>`) was renamed like a helper: nothing defined the new name, a valid kernel
  failed to link (before round 29 too): such a kernel is compiled in a unit of its own;
- a name of a letter beyond ASCII (`éint`, `éA`, or `éA` spelt as a universal character
  name) was not read whole: `int` renamed, a valid kernel failed to compile, or an
  enumerator reached a neighbour: such a kernel is compiled in a unit of its own now;
- an enumerator or typedef named like an attribute (`packed`, `aligned`) renamed the
  attribute too (`__attribute__((packed))`), which cc then ignored: the kernel computed
  another `sizeof` than alone; such a kernel is compiled in a unit of its own now, as is
  one that tests a name warm renames in a conditional (`#ifdef real`: true once renamed);
- a workload that sets `sys.argv` at import (its own defaults) had each pass given
  `[path]` again, so its `argparse` failed where `python w.py` runs it: each pass now
  starts with the `sys.argv` its import left;
- building a unit was quadratic in the names a source declares (a 2 MB source of 80,000
  took 50 s, 2.5 s before round 29): the names are kept in sets.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends.batch import compile_batch
from warmcli.backends.compiler import CompileUnit
from warmcli.backends.host.compiler import HostCompiler
from warmcli.backends.host.device import HostDevice
from warmcli.kernel import Kernel, kernel_key

LEAK = r"""
from warmcli import Kernel
DEVICE = "host"
A = Kernel(SOURCE_A, "a", "Pi", defines=DEFINES_A)
B = Kernel(SOURCE_B, "b", "Pi")

def workload(rt):
    for kernel in (A, B):
        rt.launch(kernel, rt.buffer(4, "int32"), 4)
"""
USES_MYINT = "void b(int *y, int n) { myint v = 5; y[0] = v + SIZE; }"
CASES = {
    "source macros": (
        "#define MYINT myint\n#define SZ SIZE\ntypedef int MYINT;\nenum e { SZ = 4 };\n"
        "void a(int *y, int n) { MYINT v = 3; y[0] = v + SZ; }",
        {},
        USES_MYINT,
    ),
    "kernel defines": (
        "typedef int T;\nenum e { S = 4 };\nvoid a(int *y, int n) { T v = 3; y[0] = v + S; }",
        {"T": "myint", "S": "SIZE"},
        USES_MYINT,
    ),
    "a tag in a directive": (
        "#define VEC struct vec\ntypedef VEC { int x; } vec_t;\n"
        "void a(int *y, int n) { vec_t v = {3}; y[0] = v.x; }",
        {},
        "#define V struct vec\nvoid b(int *y, int n) { V v = {5}; y[0] = v.x; }",
    ),
    "an enumerator spelt with a universal character name": (
        "enum e { \\u00e9A = 4 };\nvoid a(int *y, int n) { y[0] = \\u00e9A; }",
        {},
        "void b(int *y, int n) { y[0] = \\u00e9A; }",
    ),
    "a unicode enumerator": (
        "enum e { \u00e9A = 4 };\nvoid a(int *y, int n) { y[0] = \u00e9A; }",
        {},
        "void b(int *y, int n) { y[0] = \u00e9A; }",
    ),
}


@pytest.mark.parametrize("case", CASES)
def test_a_type_name_never_reaches_a_neighbour(warm: Warm, tmp_path: Path, case: str) -> None:
    """Kernel b uses a type name only kernel a declares (through a macro, or beyond ASCII):
    alone it does not compile, so batched after a it must not either."""
    source_a, defines_a, source_b = CASES[case]
    head = f"SOURCE_A = {source_a!r}\nDEFINES_A = {defines_a!r}\nSOURCE_B = {source_b!r}\n"
    workload = tmp_path / "w.py"
    workload.write_text(head + LEAK)
    proc = warm("run", workload, "-b", tmp_path / "b.warm", "-q", "--jobs", "1")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "KernelCompileError: kernel b failed to compile" in proc.stderr.splitlines()[0]


VALID = r"""
from warmcli import Kernel
DEVICE = "host"
A = Kernel(SOURCE, "a", "Pi")

def workload(rt):
    rt.launch(A, rt.buffer(4, "int32"), 4)
"""
VALID_SOURCES = {
    "a typedef name split by a line splice": "typedef int my\\\nint;\n"
    "void a(int *y, int n) { myint v = 3; y[0] = v; }",
    "a comma inside an enumerator's value": "#define MAX(a, b) ((a) > (b) ? (a) : (b))\n"
    "enum e { BYTES = MAX(2, sizeof(double)) };\n"
    "void a(int *y, int n) { y[0] = BYTES + (int)sizeof(int); }",
    "a unicode typedef name": "typedef int \u00e9int;\n"
    "void a(int *y, int n) { \u00e9int v = 3; y[0] = v; }",
    "a function taking an enum": "enum e { RED, BLUE };\n"
    "static int f(enum e v) { return v == BLUE; }\n"
    "void a(int *y, int n) { y[0] = f(BLUE) + 1; }",
    "a prototype of libm's sqrt": "double sqrt(double);\n"
    "void a(int *y, int n) { y[0] = (int)sqrt(16.0 + n); }",
    "_Generic in an enumerator's value": "enum e { W = _Generic(1.0f, float: 4, default: 8) };\n"
    "void a(int *y, int n) { y[0] = W; }",
}


@pytest.mark.parametrize("case", VALID_SOURCES)
def test_a_valid_kernel_compiles_under_warm(warm: Warm, tmp_path: Path, case: str) -> None:
    """Each kernel compiles with `cc` as written; warm read a name that is no type of it
    (`int` from `my\\<newline>int`, `sizeof` or `int` after a comma in an enumerator's
    value) and renamed it, so the kernel failed to compile under warm."""
    workload = tmp_path / "w.py"
    workload.write_text(f"SOURCE = {VALID_SOURCES[case]!r}\n" + VALID)
    proc = warm("run", workload, "-b", tmp_path / "b.warm", "-q", "--jobs", "1")
    assert proc.returncode == 0, proc.stderr


def _computed(kernel: Kernel, neighbour: Kernel) -> list[int]:
    """What `kernel` writes into four int zeros, built by warm's batch in one unit with
    `neighbour`, with real cc."""
    ident = HostCompiler().toolchain.identity
    units = [CompileUnit(kernel_key(k, "host", ident), k, "host") for k in (kernel, neighbour)]
    batch = compile_batch(HostCompiler(), units, jobs=1)
    assert not batch.failures, batch.failures
    built = batch.built[units[0].key]
    device = HostDevice()
    try:
        module = device.load_module(built.binary)
        fn = device.get_function(module, built.symbols[units[0].key], kernel)
        y = np.zeros(4, dtype=np.int32)
        fn(y.ctypes.data, 4)
        return y.tolist()
    finally:
        device.close()


NEIGHBOUR = Kernel("void z(int *y, int n) { y[0] = n; }", "z", "Pi")
COMPUTED = {  # what cc computes from each source alone, as written
    "an enumerator named packed": (
        "enum layout { packed = 1, loose = 2 };\n"
        "struct S { char c; int i __attribute__((packed)); };\n"
        "void a(int *y, int n) { y[0] = (int)sizeof(struct S); y[1] = packed; }",
        [5, 1, 0, 0],
    ),
    "a typedef named aligned": (
        "typedef int aligned;\n"
        "void a(int *y, int n) { struct L { char c; } __attribute__((aligned(16))) l;\n"
        "  aligned s = (int)sizeof l; y[0] = s; }",
        [16, 0, 0, 0],
    ),
    "a typedef name tested by #ifdef": (
        "typedef int real;\n#ifdef real\n#define K 7\n#else\n#define K 1\n#endif\n"
        "void a(int *y, int n) { real v = K; y[0] = v; }",
        [1, 0, 0, 0],
    ),
}


@pytest.mark.parametrize("case", COMPUTED)
def test_a_kernel_computes_what_cc_computes_from_it(case: str) -> None:
    """A renaming macro for `packed` (an enumerator) also renamed the attribute
    `__attribute__((packed))`, which cc then ignored: the struct was not packed, so the
    kernel computed another size than alone; one for `real` made `#ifdef real` true."""
    source, alone = COMPUTED[case]
    assert _computed(Kernel(source, "a", "Pi"), NEIGHBOUR) == alone


OWN_ARGV = r"""
import argparse, sys
from warmcli import Kernel
DEVICE = "host"
sys.argv = [sys.argv[0], "--size", "8"]  # the script's own defaults, set at import
K = Kernel("void k(int *y, int n) { y[0] = n; }", "k", "Pi")

def workload(rt):
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, required=True)
    size = parser.parse_args().size
    sys.argv.append("--junk")  # a pass's own change: the next pass starts without it
    rt.launch(K, rt.buffer(size, "int32"), size)
"""


def test_a_workload_that_sets_its_argv_at_import_keeps_it_for_its_passes(
    warm: Warm, tmp_path: Path
) -> None:
    """Under `python w.py` the `sys.argv` a script sets at import is what its entry reads;
    under `warm run` each pass was given `[path]` again, so its `argparse` exited 2."""
    workload = tmp_path / "w.py"
    workload.write_text(OWN_ARGV)
    proc = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert proc.returncode == 0, proc.stderr
