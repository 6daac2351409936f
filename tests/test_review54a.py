"""Holes review54a found in stop 54's changes, each reproduced for real: the real CLI (forked,
`tests/forked_cli.py`), the real C compiler, real FIFOs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from forked_cli import forked_warm as forked_warm

WARM = forked_warm  # (its fixture, `warm`, each command forked)

INCLUDING = """
from warmcli import Kernel
import numpy as np

DEVICE = "host"
SRC = ('#include <{header}>\\n'
       "void scale(float *x, int n) {{ for (int i = 0; i < n; i++) x[i] *= 2; }}")
SCALE = Kernel(SRC, "scale", "Pi", options={options!r})

def workload(rt):
    x = rt.upload(np.arange(4, dtype=np.float32))
    rt.launch(SCALE, x, 4)
    return x
"""


@pytest.mark.parametrize("door", ["include_next", "system header"])
def test_a_fifo_reached_through_include_next_or_a_system_header_is_refused(
    warm, tmp_path: Path, door: str
) -> None:
    """16cb5cf0 refused a FIFO an `#include` finds, but two other doors reach one as cc does:
    an `#include_next <nx.h>` in `-Ia/nx.h` reading `-Ib/nx.h` (a FIFO), and `<stdio.h>`,
    a system header, whose `#include <features.h>` cc reads from the kernel's `-I` folder
    (a FIFO there). Both were keyed as no file (`os.path.isfile`), so cc started and waited
    until `--compile-timeout` (600 s by default; here 2 s: 'did not finish'). Now each is
    refused before cc starts, naming the FIFO."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    if door == "include_next":
        (a / "nx.h").write_text("#include_next <nx.h>\n")
        os.mkfifo(fifo := b / "nx.h")
        header, options = "nx.h", (f"-I{a}", f"-I{b}")
    else:
        os.mkfifo(fifo := a / "features.h")
        header, options = "stdio.h", (f"-I{a}",)
    workload = tmp_path / "including.py"
    workload.write_text(INCLUDING.format(header=header, options=options))
    done = warm("run", workload, "--bundle", tmp_path / "b.warm", "--compile-timeout", "2")
    assert done.returncode == 2, done.stdout + done.stderr
    said = "not compiled: a file it reads (a header, or one it links) is no regular file"
    assert f"{said}: {fifo} is a FIFO" in done.stderr, done.stderr
    assert "did not finish" not in done.stderr and "Traceback" not in done.stderr
