"""A new user's fleet trial (stop 41, b): one bundle warmed on CI, signed, shared and
served by many production processes at once, on workloads warm had not seen. The real CLI
and real production processes in subprocesses, the real cc, real SQLite files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import Warm

# A tunable whose `key=` text holds a newline (a user's own key), and one plain kernel.
NEWLINE_KEY = """
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
SRC = "void f(float *y, int n) { for (int i = 0; i < n; i++) y[i] = y[i] * 2 + V; }"
T = Tunable("dbl", {f"v{v}": Kernel(SRC, "f", "Pi", defines={"V": v}) for v in (0, 0.0)},
            lambda rt, k, y, n, *, stream=None: rt.launch(k, y, n, stream=stream),
            key=lambda y, n: f"rows\\n{n}")
ONE = Kernel("void one(float *y) { y[0] = 1; }", "one", "P")
def workload(rt):
    y = rt.upload(np.arange(8, dtype=np.float32))
    rt.tune(T, y, 8)
    rt.launch(ONE, y)
"""
SERVE = """
import runpy, sys
import warmcli
warmcli.use_bundle(sys.argv[2], write=sys.argv[3] == "write")
runpy.run_path(sys.argv[1])["workload"](warmcli.runtime())
"""


def _serve(warm: Warm, workload: Path, bundle: Path, how: str) -> subprocess.CompletedProcess[str]:
    env = dict(warm.env, WARM_REPORT="1")
    return subprocess.run(
        [sys.executable, "-c", SERVE, str(workload), str(bundle), how],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip


def test_warm_report_names_a_bundle_path_and_a_tune_key_holding_a_newline_on_one_line(
    warm: Warm, tmp_path: Path
) -> None:
    """`WARM_REPORT=1` printed a bundle path holding a newline (`odd/n<LF>l.warm`) and a
    miss's tune key holding one (a `key=` text) raw, each over two lines, while its own
    write-back line and `warm stats` wrote them escaped (`\\x0a`)."""
    workload = tmp_path / "w.py"
    workload.write_text(NEWLINE_KEY)
    folder = tmp_path / "odd\nplace"
    folder.mkdir()
    bundle = folder / "b\nl.warm"
    made = warm("run", workload, "-b", bundle, "-q")
    assert made.returncode == 0, made.stderr
    served = _serve(warm, workload, bundle, "read")
    assert served.returncode == 0, served.stderr
    assert served.stderr.count("\n") == 1, served.stderr
    assert "b\\x0al.warm served everything" in served.stderr, served.stderr
    other = tmp_path / "other\nb.warm"  # holds the plain kernel only: the tune is a miss
    (tmp_path / "one.py").write_text(NEWLINE_KEY.replace("    rt.tune(T, y, 8)\n", ""))
    assert warm("run", tmp_path / "one.py", "-b", other, "-q").returncode == 0
    for how in ("read", "write"):
        served = _serve(warm, workload, other, how)
        assert served.returncode == 0, served.stderr
        lines = served.stderr.splitlines()
        assert all(line.startswith(("warm: ", "  ")) for line in lines), served.stderr
        assert any(line.startswith("  tune dbl rows\\x0a8 on host") for line in lines), lines
        assert any("other\\x0ab.warm lacked 2 kernel(s) and 1 tune(s)" in x for x in lines)
