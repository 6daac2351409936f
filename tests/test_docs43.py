"""README audit of stop 43 (docs43): the report's advice where strict mode refused what the
bundle lacked. The README says that where the process cannot write its bundle, or the file
it opened was removed since, the report says so instead of `re-warm it with warm run`; a
strict process whose only misses were refused still said `re-warm it with warm run`. Real
CLI, a real bundle, the real C compiler."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

KERNELS = """
from warmcli import Kernel

ADD = Kernel("void add(const float*a,float*o,int n){for(int i=0;i<n;i++)o[i]=a[i]+1;}",
             "add", "PPi")
MUL = Kernel("void mul(const float*a,float*o,int n){for(int i=0;i<n;i++)o[i]=a[i]*2;}",
             "mul", "PPi")
"""

WARMUP = """
import numpy as np
from kernels import ADD

def workload(rt):
    x, o = rt.upload(np.ones(4, np.float32)), rt.buffer(4)
    rt.launch(ADD, x, o, 4)
"""

# Served from an absolute path (an `importlib.resources.as_file` copy), the file removed once
# the process has it open (the copy's block ended); then a kernel the bundle lacks, refused.
SERVE_REMOVED = """
import os, sys
import numpy as np, warmcli
from kernels import ADD, MUL
warmcli.use_bundle(sys.argv[1])
rt = warmcli.runtime("host")
x, o = rt.upload(np.ones(4, np.float32)), rt.buffer(4)
rt.launch(ADD, x, o, 4)
os.remove(sys.argv[1])
try:
    rt.launch(MUL, x, o, 4)
except warmcli.StrictMissError:
    print("refused")
"""


def test_strict_report_of_a_removed_bundle_says_so(warm: Warm, tmp_path: Path) -> None:
    """Strict mode refused the only miss of a bundle whose file was removed since it was
    opened: the report said `re-warm it with warm run` (the README: `no file is at that path
    now: it was removed since it was opened`, as the non-strict report says)."""
    (tmp_path / "kernels.py").write_text(KERNELS)
    (tmp_path / "w.py").write_text(WARMUP)
    proc = warm("run", "w.py", "-b", "b.warm", "--quiet", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bundle = tmp_path / "b.warm"
    env = dict(warm.env, WARM_STRICT="1", WARM_REPORT="1")
    served = subprocess.run(
        [sys.executable, "-c", SERVE_REMOVED, str(bundle)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert served.returncode == 0 and served.stdout == "refused\n", served.stderr
    assert "which strict mode refused (StrictMissError)" in served.stderr, served.stderr
    assert "no file is at that path now: it was removed since it was opened" in served.stderr
    assert "re-warm it with `warm run`" not in served.stderr, served.stderr
    assert "kernel mul on host" in served.stderr, served.stderr
