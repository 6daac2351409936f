"""trial46a: warm added to a project's CI from the README alone (a package of host C kernels,
one with a header, one tunable, warmed through its pytest suite, cached between CI jobs,
shipped as package data, served by a pre-fork server). What it found that README and warm
disagreed on, each a test that failed before its fix."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

# A workload that prints once a pass and then lingers, so that a terminal's progress bars are
# redrawn (Rich's `Live` redraws at each print, and ten times a second) while each pass runs.
LINGERING = r"""
import time
from warmcli import Kernel, Tunable

DEVICE = "host"
SRC = "void sc(float *x, int n) { for (int i = 0; i < n; i++) x[i] = x[i] * F; }"
T = Tunable(
    "sc",
    {f"f{f}": Kernel(SRC, "sc", "Pi", defines={"F": f}, name="sc") for f in (1, 2)},
    lambda rt, k, x, n, *, stream=None: rt.launch(k, x, n, stream=stream),
)


def workload(rt):
    x = rt.buffer(64, "float32")
    rt.tune(T, x, 64)
    print("pass-ended", flush=True)
    time.sleep(0.6)
"""


def _in_terminal(args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """`python -m warmcli *args` under a pseudo-terminal: its exit code and all it drew."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "warmcli", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=cwd,
    )
    os.close(slave)
    chunks = []
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return proc.wait(timeout=120), b"".join(chunks).decode(errors="replace")


def test_no_progress_bar_is_drawn_during_the_verify_pass(tmp_path: Path) -> None:
    """README: the bars are shown "each only while the pass can advance it". The verify pass
    advances neither, yet the CompileAndAutotune pass's bars (kernels 2/2, candidates 2/2)
    were drawn again at every print and every tenth of a second until the run ended."""
    (tmp_path / "w.py").write_text(LINGERING)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env.update(WARM_HOME=str(tmp_path / "home"), COLUMNS="120", LINES="40", TERM="xterm")
    code, shown = _in_terminal(["run", "w.py", "--bundle", "w.warm"], tmp_path, env)
    assert code == 0, shown
    marks = shown.split("pass-ended")
    assert len(marks) == 4, shown  # once a pass, the verify pass's last
    assert "CompileAndAutotune: candidates measured" in marks[1] + marks[2], shown
    assert "kernels compiled" not in marks[3] and "candidates measured" not in marks[3], marks[3]
