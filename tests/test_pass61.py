"""Stop 61's cuts of `warm run`'s own cost (issue 16, row `pass_overhead`), held to the
behaviour they keep.

`warm run` without `--key` imports none of `warm sign`'s command module (`warmcli.cli.sign`) or
its signature report: only a signing run checks its key there.
"""

from __future__ import annotations

WORKLOAD = """
import sys
from pathlib import Path

import numpy as np

from warmcli import Kernel

DEVICE = "host"
K = Kernel("void k(float *x, int n) {{ for (int i = 0; i < n; i++) x[i] += 1.0f; }}", "k", "Pi")


def workload(rt):
    x = rt.upload(np.zeros(4, dtype=np.float32))
    rt.launch(K, x, 4)
    held = sorted(m for m in sys.modules if m in {watched!r})
    Path({marks!r}).write_text(repr(held))
"""

SIGNING = ("warmcli.cli.sign", "warmcli.bundle.signature_report")


def test_a_run_without_key_imports_no_signing_command(warm, tmp_path):
    """The real CLI: `warm run` without `--key` had imported `warmcli.cli.sign` (for the key's
    two checks) and with it the signature report (~2.5 ms of every run's start, two
    dataclasses); neither is in its worker now (failed before: both were)."""
    marks = tmp_path / "marks.txt"
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD.format(watched=SIGNING, marks=str(marks)))
    proc = warm("run", workload, "--bundle", tmp_path / "b.warm", "--json")
    assert proc.returncode == 0, proc.stderr
    assert marks.read_text() == "[]"
