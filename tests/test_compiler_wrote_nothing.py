"""A C compiler (WARM_CC) that exits 0 but writes no library, as `true` or a broken wrapper
does, is one line naming it and what it did not write: it was `FileNotFoundError: [Errno 2]
No such file or directory: '/tmp/warm-cc-.../batch.so'`. The real CLI in a subprocess.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm
from fake_cc import with_cc
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

WORKLOAD = """
from warmcli import Kernel

DEVICE = "host"
K = Kernel("void f(float *x, int n) { }", "f", "Pi")


def workload(rt):
    rt.launch(K, rt.buffer(4), 4)
"""
SILENT = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "cc (fake) 1.0"; fi
exit 0
"""


def test_a_compiler_that_writes_no_library_is_named_in_one_line(
    warm: Warm, workload_file, bundle_path: Path, tmp_path: Path
) -> None:
    silent, cc = with_cc(warm, tmp_path, "silentcc", SILENT), tmp_path / "silentcc"
    proc = silent("run", workload_file(WORKLOAD), "-b", bundle_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert str(cc) in line and "exited 0 but wrote no shared library" in line, line
    assert "FileNotFoundError" not in line and "Errno" not in line, line
