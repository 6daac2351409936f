"""Trial 48b (a fleet operator's life, README only): what it found, each through the real CLI.

- A tuning-heavy `warm run` kept two lines of its worker's journal per candidate measured, in a
  temporary file of `TMPDIR`: 200 tunes of 16 candidates wrote 570 kB there, so a small `TMPDIR`,
  or a file size limit the bundle itself fits in, ended the run with `[Errno 27] File too large`
  and a second error blaming the workload (`the workload ended the process itself (exit status 2,
  e.g. os._exit)`; under `--json`, two JSON objects), saying `nothing was stored` in a bundle it
  had stored 169 tunes in, and leaving that new bundle behind.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, Warm

MANY = """
from warmcli import Kernel, Tunable

SRC = "void fill(float *x, int n) { for (int i = 0; i < n; i++) x[i] = (float)(V - V) + 1.0f; }"


def launch(rt, kernel, x, n, *, stream=None):
    rt.launch(kernel, x, n, stream=stream)


FILL = Tunable(
    "fill",
    {f"v{v}": Kernel(SRC, "fill", "Pi", defines={"V": v}) for v in range(16)},
    launch,
    warmup=0,
    repeats=1,
)


def workload(rt):
    x = rt.buffer(400, "float32")
    for n in range(1, 201):
        rt.tune(FILL, x, n)
"""


def _limited(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def test_a_tuning_heavy_run_fits_a_file_size_limit_its_bundle_fits(
    warm: Warm, tmp_path: Path
) -> None:
    workload = tmp_path / "many.py"
    workload.write_text(MANY)
    bundle = tmp_path / "b.warm"
    # The bundle of 200 tunes of 16 candidates is about 400 kB; the journal of the worker
    # was 570 kB, 2 lines a candidate. 500 kB: room for the bundle and its own journal.
    proc = subprocess.run(
        [sys.executable, "-m", "warmcli", "run", str(workload), "-b", str(bundle), "--json"],
        capture_output=True,
        text=True,
        env=dict(warm.env, TMPDIR=str(tmp_path)),
        cwd=ROOT,
        timeout=120,
        preexec_fn=lambda: _limited(500_000),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)  # one object
    assert report["stored"] == {"kernels": 16, "tunes": 200}
    assert report["verified"] is True
    assert bundle.stat().st_size < 500_000
