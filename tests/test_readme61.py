"""README claims checked by running them (stop 61): where the README and warm disagreed, the
side that was wrong mended, and pinned here. Every test runs the real CLI in a subprocess
(the `warm` fixture), with the system C compiler and real bundles from `warm run`.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm

HEADERS = """
import os
import numpy as np
from warmcli import Kernel

DEVICE = "host"
HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = '#include "a.h"\\n#include "b.h"\\nvoid g(float *x) { x[0] = A + B; }'
G = Kernel(SOURCE, "g", "P", options=[f"-I{HERE}/inc"])

def workload(rt):
    rt.launch(G, rt.upload(np.zeros(1, dtype=np.float32)))
"""


def test_a_headers_miss_names_what_differs_from_the_nearest_build(
    warm: Warm, tmp_path: Path
) -> None:
    """README (Explaining misses): warm names the part of the key that differs from the
    nearest entry the bundle holds, a header by name (`changed: gain.h`). A bundle holding two
    builds of one kernel, a.h edited between them, then b.h edited: the nearest build (the
    second) differs in b.h alone. The line named a.h too (the first build's list was read),
    sending the user to a header the bundle holds a build of."""
    (tmp_path / "inc").mkdir()
    (tmp_path / "h.py").write_text(HEADERS)
    a, b = tmp_path / "inc" / "a.h", tmp_path / "inc" / "b.h"
    a.write_text("#define A 1\n")
    b.write_text("#define B 1\n")
    bundle = tmp_path / "h.warm"
    for step in range(2):
        done = warm("run", tmp_path / "h.py", "-b", bundle, "-q")
        assert done.returncode == 0, done.stdout + done.stderr
        a.write_text("#define A 2\n") if step == 0 else b.write_text("#define B 2\n")
    done = warm("verify", bundle, "--workload", tmp_path / "h.py")
    assert done.returncode == 1, done.stdout + done.stderr
    [miss] = [line for line in done.stdout.splitlines() if line.startswith("miss: ")]
    assert miss.startswith("miss: kernel g: headers: "), miss
    assert miss.endswith("(changed: b.h)"), miss
