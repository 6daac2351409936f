"""`warm run`'s stub folder (`warmcli.warming.worker_names`) made only where a stub is needed.

The folder a `spawn` pool's workers import a hidden-name workload from (`test.py`) was made
by every `warm run` before its worker was forked, and removed as it ended: a `mkdir` and a
`rmdir` (milliseconds on a busy disk, the `rmdir` after the worker's exit) for nothing,
where the workload's name hides no module of Python's. It is made now by the worker that
needs a stub, under a name the supervisor chose before the fork (it removes it as it ends
however the worker ended); a worker started again after a crashed candidate uses the
folder the first one made. Through the real CLI, a real cc, a real `spawn` pool.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from conftest import Warm

LISTS_ITS_TEMP = """\
import os
import numpy as np
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void k(float *y, long n) { for (long i = 0; i < n; i++) y[i] *= 2; }", "k", "Pl")
def workload(rt):
    temp = os.environ["TMPDIR"]
    print("stub folders:", sorted(p for p in os.listdir(temp) if p.startswith("warm-workers-")))
    y = rt.upload(np.ones(4, np.float32))
    rt.launch(K, y, 4)
"""


def test_a_run_whose_workload_hides_no_module_makes_no_stub_folder(
    warm: Warm, tmp_path: Path
) -> None:
    workload = tmp_path / "plain_name.py"
    workload.write_text(LISTS_ITS_TEMP)
    with tempfile.TemporaryDirectory(prefix="w39", dir="/tmp") as temp:
        warm.env["TMPDIR"] = temp
        done = warm("run", workload, "-b", tmp_path / "b.warm", timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.count("stub folders: []") == 3, done.stdout  # each pass's run
        assert not [p for p in os.listdir(temp) if p.startswith("warm-workers-")]


# A Tunable whose first candidate segfaults (the worker running it crashes; warm runs the
# passes again without it), for workloads that also import Kernel and Tunable.
SEGV_CANDIDATE = '''DEVICE = "host"
SRC = """
void scale(float *x, int n) {
#if MODE == 1
    *(volatile int *)0 = 1;
#endif
    for (int i = 0; i < n; i++) x[i] *= 2.0f;
}"""
SCALE = Tunable(
    "scale",
    {name: Kernel(SRC, "scale", "Pi", defines={"MODE": mode})
     for name, mode in (("segv", 1), ("fine", 0))},
    lambda rt, k, x, n, stream=None: rt.launch(k, x, n, stream=stream),
)
'''

CRASHES_THEN_SPAWNS = (
    """\
import multiprocessing as mp
from warmcli import Kernel, Tunable
"""
    + SEGV_CANDIDATE
    + """def square(i):
    return i * i
def workload(rt):
    x = rt.buffer(16)
    rt.tune(SCALE, x, 16)
    with mp.get_context("spawn").Pool(1) as pool:
        print("pool says", pool.map(square, range(4)))
"""
)


def test_a_worker_started_again_after_a_crash_imports_a_hidden_name_by_its_stub(
    warm: Warm, tmp_path: Path
) -> None:
    """The first worker made the stub folder and crashed in a candidate; the next one (the
    run started again) writes its stub into that same folder and its `spawn` pool imports
    the workload from it; the folder is gone after the run."""
    folder = tmp_path / "job"
    folder.mkdir()
    workload = folder / "test.py"  # hides Python's own `test`: known by a stub only
    workload.write_text(CRASHES_THEN_SPAWNS)
    with tempfile.TemporaryDirectory(prefix="w39", dir="/tmp") as temp:
        warm.env["TMPDIR"] = temp
        done = warm("run", workload, "-b", tmp_path / "b.warm", "--json", timeout=180)
        assert done.returncode == 0, done.stderr
        assert "candidate segv crashed (SIGSEGV); it is excluded" in done.stderr, done.stderr
        assert "pool says [0, 1, 4, 9]" in done.stderr, done.stderr  # (--json: on stderr)
        assert json.loads(done.stdout)["verified"] is True
        assert not [p for p in os.listdir(temp) if p.startswith("warm-workers-")]
