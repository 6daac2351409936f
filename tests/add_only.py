"""A bundle holding `add` only, and the kernels `add`, `mul` and `sub` a served process may
launch beside it: what the tests of reports, strict refusals and write-backs after
`production.close()` start from (tests/test_review43d.py, test_trial48c.py, test_review48e.py)."""

from __future__ import annotations

from pathlib import Path

from conftest import Warm

KERNELS = """
from warmcli import Kernel

ADD = Kernel("void add(const float*a,float*o,int n){for(int i=0;i<n;i++)o[i]=a[i]+1;}",
             "add", "PPi")
MUL = Kernel("void mul(const float*a,float*o,int n){for(int i=0;i<n;i++)o[i]=a[i]*2;}",
             "mul", "PPi")
SUB = Kernel("void sub(const float*a,float*o,int n){for(int i=0;i<n;i++)o[i]=a[i]-1;}",
             "sub", "PPi")
"""


def warmed(warm: Warm, tmp_path: Path) -> None:
    """`kernels.py` and `b.warm` in `tmp_path`, the bundle holding `add` only."""
    (tmp_path / "kernels.py").write_text(KERNELS)
    (tmp_path / "w.py").write_text(
        "import numpy as np\nfrom kernels import ADD\n\ndef workload(rt):\n"
        "    x, o = rt.upload(np.ones(4, np.float32)), rt.buffer(4)\n"
        "    rt.launch(ADD, x, o, 4)\n"
    )
    proc = warm("run", "w.py", "-b", "b.warm", "-q", cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
