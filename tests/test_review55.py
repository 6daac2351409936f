"""Faults review55 found trying warm as users and attackers would, each failing before its fix.

A workload that names its include folder in `CPATH` itself (`os.environ["CPATH"] = ...`) after
its first kernel was keyed: `kernel._env_includes` read `CPATH` once a process, so the kernels
keyed after it kept the first value (unset: no header keyed), while cc, started later, read the
variable as set: the header an edit changed was served the old build (101 where a cold start
computes 105). Real parts: the real CLI (forked) warms with the real cc, a real production
process serves.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_readme54 import SERVE

# A plain kernel keyed first (CPATH unset then), then one including `cfg.h` from the folder
# the workload names in CPATH itself.
CPATH_SET_LATE = """
import os
from warmcli import Kernel
DEVICE = "host"
INC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inc")
PLAIN = Kernel("void hundred(int *y) { y[0] = 100; }", "hundred", "P")
CFG = Kernel('#include "cfg.h"\\nvoid cfg(int *y) { y[0] += K; }', "cfg", "P")
def workload(rt):
    y = rt.buffer(1, "int32")
    rt.launch(PLAIN, y)
    os.environ["CPATH"] = INC
    rt.launch(CFG, y)
    return [y]
"""


def test_a_header_found_through_cpath_set_after_the_first_key_is_keyed(
    warm: Warm, tmp_path: Path, workload_file
) -> None:
    """Before: the edited `cfg.h` (K 5) was served the build of K 1: 101, where cold 105."""
    (tmp_path / "inc").mkdir()
    header = tmp_path / "inc" / "cfg.h"
    header.write_text("#define K 1\n")
    path, bundle = workload_file(CPATH_SET_LATE), tmp_path / "b.warm"
    done = warm("run", path, "-b", bundle, "--quiet")
    assert done.returncode == 0, done.stderr
    assert warm.production(SERVE, path, bundle=bundle) == [101]
    header.write_text("#define K 5\n")
    assert warm.production(SERVE, path) == [105]  # cold
    assert warm.production(SERVE, path, bundle=bundle) == [105]
