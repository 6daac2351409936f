"""One clock pre-test (fold59).

`warmcli.build_clock.clock_reason` is the one test of whether a text spells `__TIME__`,
`__DATE__` or `__TIMESTAMP__`: a header's bytes and a kernel's source, option or define value
alike (`build_clock` had a copy of `directives.clock_reason`'s pre-test for text, imported it
where it passed, and `directives` compiled all its patterns at import); keying a kernel that
spells the clock compiles the clock's pattern alone, and imports no `warmcli.directives`.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import ROOT

from warmcli.build_clock import clock_reason, reads_clock

SPELLED = [
    "x = __TIME__;",
    "/* __DATE__ */",
    "__TIMESTAMP__",
    "TIME",
    "DATE__x",
    "\udc80 __TIME__",
    "",
]


@pytest.mark.parametrize("text", SPELLED)
def test_a_kernels_text_and_a_headers_bytes_are_judged_by_one_clock_test(text: str) -> None:
    data = text.encode(errors="surrogatepass")
    assert clock_reason(text) == clock_reason(data)
    assert bool(clock_reason(text)) == any(w in text for w in ("__TIME__", "__DATE__", "__TIMES"))
    assert reads_clock("", (), (("STAMP", text),)) == clock_reason(data)  # a define's value
    assert reads_clock("", (f"-DS={text}",), ()) == clock_reason(data)  # an option


KEYED = """
import json, re, sys
from warmcli import Kernel
from warmcli.kernel import kernel_key
before = {key[1] for key in re._cache}
kernel = Kernel("void f(int *x) { x[0] = sizeof(__TIME__); }", "f", "P")
kernel_key(kernel, "host", "cc")
compiled = {key[1] for key in re._cache} - before
imported = "warmcli.directives" in sys.modules
from warmcli import build_clock, directives
print(json.dumps([build_clock._CLOCK.pattern in compiled, imported,
                  directives._LITERAL_OR_COMMENT.pattern in compiled,
                  directives._ASSEMBLER_READS.pattern in compiled]))
"""


def test_keying_a_kernel_that_spells_the_clock_compiles_the_clocks_pattern_alone() -> None:
    out = subprocess.run(
        [sys.executable, "-c", KEYED], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == [True, False, False, False]
