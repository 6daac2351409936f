"""The per-kernel serving path's fast forms give what their plain forms give (issue 16).

Keys are stored in bundles, so a kernel's content hash written directly must be the
digest the JSON encoder writes, byte for byte, whatever the kernel holds.
"""

from __future__ import annotations

import pytest

from warmcli.kernel import Kernel, _digest

KERNELS = [
    Kernel("void f(int *p) { p[0] = 1; }", "f", "P"),
    Kernel('void g(){ "é\\n\t\x01" }', "g", "Pi", options=["-O2", '-DX="y"']),
    Kernel("s", "h", defines={"A": 1, "B": 'x"y', "C": True, "D": "ü"}, name="n"),
    Kernel("s", "h", language="cuda", options=("-lineinfo",)),
    Kernel("s", "h", options=[3]),  # not text: written as JSON writes a number
]


@pytest.mark.parametrize("kernel", KERNELS, ids=range(len(KERNELS)))
def test_content_hash_is_the_json_digest(kernel: Kernel) -> None:
    assert kernel.content_hash == _digest(kernel._content())
