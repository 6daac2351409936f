"""trial39: a team serving inference adopts warm from the README alone.

Their server's kernels are host C kernels behind several Tunables keyed over array shapes
and dtypes (float32, float64, int32; 0-d and empty arrays, non-contiguous views), launched
from several threads on the first requests; the bundle is warmed in CI with `warm run`,
shipped read-only and served by processes that fork workers. The real CLI in a
subprocess, the real cc, real bundles.
"""

from __future__ import annotations

import os
from pathlib import Path

from conftest import Warm

FORKSERVER_POOL = """
import concurrent.futures as cf
import multiprocessing as mp

import numpy as np
from warmcli import Kernel

ADD = Kernel(
    "void add1(float *y, int n) { for (int i = 0; i < n; i++) y[i] += 1.0f; }", "add1", "Pi"
)


def plus(x):
    return x + 1


def workload(rt):
    y = rt.upload(np.zeros(3, np.float32))
    rt.launch(ADD, y, 3)
    with cf.ProcessPoolExecutor(2, mp_context=mp.get_context("{method}")) as ex:
        assert list(ex.map(plus, [1, 2])) == [2, 3]
"""


def test_pool_workload_leaves_nothing_in_tmpdir(warm: Warm, tmp_path: Path) -> None:
    """A workload that maps over a forkserver pool (as the server's warm-up does) leaves
    nothing in TMPDIR under `warm run`, as under `python`: multiprocessing's folder of the
    forkserver's socket (`pymp-*/listener-*`) is removed when the worker ends."""
    work = tmp_path / "pool.py"
    work.write_text(FORKSERVER_POOL.replace("{method}", "forkserver"))
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir()
    env = dict(warm.env, TMPDIR=str(tmpdir))
    proc = Warm(env)("run", work, "-b", tmp_path / "pool.warm", "--quiet")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert sorted(os.listdir(tmpdir)) == []
