"""A hot process pays for no more than serving needs (hotfloor39).

What only a compile or a key of a kernel with options needs is done on first use, not at
import: the host compiler's patterns are compiled when a source is checked, and a host
kernel that names no option is keyed without `warmcli.linked` (its key as before)."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT

from warmcli import Kernel
from warmcli.backends.host.refused import reads_assembler_file
from warmcli.kernel import included_headers
from warmcli.linked import with_linked

SERVING = """
import json, re, sys
import numpy.random
from warmcli import Kernel, Runtime, Tunable, use_bundle
compiled = {key[1] for key in re._cache}
loaded = "warmcli.backends.host.refused" in sys.modules
from warmcli import directives
print(json.dumps([p.pattern in compiled for p in (directives._ASSEMBLER_READS,
                                                  directives._LITERAL_OR_COMMENT)] + [loaded]))
"""


def test_the_host_compilers_patterns_are_not_compiled_by_warms_serving_imports() -> None:
    out = subprocess.run(
        [sys.executable, "-c", SERVING], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == [False, False, False]


def test_the_host_compilers_patterns_still_refuse_an_assembler_file_read() -> None:
    assert reads_assembler_file('void f(void) { __asm__(".incbin \\"/opt/t.bin\\""); }')
    assert reads_assembler_file('__asm__(".INCLUDE\\t\\"x.s\\"");')
    assert not reads_assembler_file('/* .incbin "/opt/t.bin" */ void f(void) {}')
    assert not reads_assembler_file('// .incbin "/opt/t.bin"\nvoid f(void) {}')


def test_a_host_kernel_naming_no_option_is_keyed_as_with_linked_keys_it() -> None:
    kernel = Kernel("void f(float *x) { x[0] = 1.0f; }", "f", "P")
    assert kernel.options == ()
    headers = included_headers(kernel)
    assert headers == with_linked(headers, kernel.options, lambda: "/opt/lib")
