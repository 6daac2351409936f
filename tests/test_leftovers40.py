"""leftovers40: small wrongs left from the last stop.

- An exit function of the workload that ends its process with `os._exit(N)`, N not 0 (plain
  Python exits N: a failure), left `warm run`'s exit code as the run decided it, silently; one
  that crashed it was said in one warning line. Now `os._exit(N)` is said in one line too
  (the run's code stands, as the README says); `os._exit(0)`, the idiom that skips a
  library's teardown, stays silent.

Real CLI in a subprocess, real cc, real SQLite files.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm

HOST_WORKLOAD = r"""
import atexit, os
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void fill(float *o, int n) { for (int i = 0; i < n; i++) o[i] = 2.0f; }", "fill", "Pi")
def workload(rt):
    o = rt.buffer(4, "float32")
    rt.launch(K, o, 4)
    return o
"""


def test_an_exit_functions_nonzero_os_exit_is_one_warning_line(warm: Warm, tmp_path: Path) -> None:
    workload = tmp_path / "w.py"
    workload.write_text(HOST_WORKLOAD + "atexit.register(os._exit, 3)\n")
    for command in (
        ("run", workload, "-b", tmp_path / "b.warm", "-q"),
        ("verify", tmp_path / "b.warm", "-w", workload, "-q"),
    ):
        done = warm(*command)
        assert done.returncode == 0, done.stderr  # the run's code stands (README)
        assert done.stderr == (
            "warm: warning: the workload's exit functions ended its process with os._exit(3)"
            " after the run finished (ignored: the run's exit code stands)\n"
        ), done.stderr
        assert "the bundle is complete" in done.stdout
