"""Review of the alias a C kernel in a unit of its own exports (`warm_<key>_<entry>`).

Bugs found:
- a kernel alone (an `#include`, `__func__`) built with `-fvisibility=hidden`, its entry
  marked `visibility("default")`, loaded under plain cc and before the alias; the alias,
  hidden by the option, was not exported and every launch failed: such a kernel's entry is
  renamed again (as before), so its symbol carries the entry's visibility;
- a C99 `inline` entry alone (cc emits no function to alias) was told its parameter
  letters do not match: it is told its function does not compile;
- a `static` entry with an attribute before its name (`static __attribute__((noinline))
  void k(`) was not seen as static: alone, its alias exported what cc does not.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, each process forked)
from test_sharing_fuzz29 import SERVE, warmed_and_served

from warmcli.kernel import Kernel

WORKLOAD = """\
from warmcli import Kernel
DEVICE = "host"
HIDDEN = ("-fvisibility=hidden",)
A = Kernel('#include <stddef.h>\\n__attribute__((visibility("default")))\\n'
           'void a(int *y, int n) { y[0] = 7 + (int)sizeof(size_t) * 0; }', "a", "Pi",
           options=HIDDEN)
B = Kernel('__attribute__((visibility("default"))) void b(int *y, int n) '
           '{ y[1] = sizeof(__func__); }', "b", "Pi", options=HIDDEN)
def workload(rt):
    y = rt.buffer(4, "int32")
    rt.launch(A, y, 4)
    rt.launch(B, y, 4)
    return y
"""


def test_a_kernel_alone_with_hidden_visibility_loads(warm: Warm, tmp_path: Path) -> None:
    assert warmed_and_served(warm, tmp_path, WORKLOAD)[0] == 7
    assert warm.production(SERVE, tmp_path, "none")[0] == 7


def test_an_inline_entry_alone_is_not_told_its_letters_mismatch(tmp_path: Path) -> None:
    from warmcli.backends.batch import compile_batch
    from warmcli.backends.compiler import CompileUnit
    from warmcli.backends.host.compiler import HostCompiler
    from warmcli.kernel import kernel_key

    kernel = Kernel("inline void k(int *y, int n) { y[0] = sizeof(__func__); }", "k", "Pi")
    compiler = HostCompiler()
    unit = CompileUnit(kernel_key(kernel, "host", compiler.toolchain.identity), kernel, "host")
    result = compile_batch(compiler, [unit], jobs=1)
    if unit.key in result.built:  # a toolchain that aliases it (or defines it): no claim
        return
    message = str(result.failures[unit.key])
    assert "parameter letters" not in message, message
    assert "does not compile" in message, message


STATIC_ENTRIES = [
    "static __attribute__((noinline)) void k(unsigned char *o) { o[0] = 1; }",
    "static inline __attribute__((always_inline, unused)) void k(unsigned char *o) { o[0] = 1; }",
]


@pytest.mark.parametrize("source", STATIC_ENTRIES)
def test_a_static_entry_with_an_attribute_is_exported_by_no_build(
    source: str, tmp_path: Path
) -> None:
    """cc exports no `static` function, an attribute between or not: nor may the alias
    (warm's build of it fails, named, as plain cc's exports nothing)."""
    from c_kernel_fuzz import alone, batched

    kernel = Kernel("#include <stddef.h>\n" + source, "k", "P")
    assert alone(kernel, tmp_path) is None
    assert batched([kernel], tmp_path) == [None]
