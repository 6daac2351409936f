"""Review of stop 36's merged change: the next case over of each fix, attacked for real.

Real parts only: the CLI in subprocesses, the system cc, SQLite files.

- A tune row another writer "stored alike since this writer opened the bundle" is kept,
  not rewritten (`tune_row.write_tune_row`). A row from elsewhere stamped in the future
  (`updated` past now: a bundle from another machine, or a clock that jumped) read as
  stored since: a run re-measuring it under WARM_TRUSTED_KEYS (its row no trusted key
  covers) kept the foreign row, said "0 new tune(s)", and signed it with the trusted key.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from conftest import Warm

TUNED = r"""
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
SRC = ("void scale(const float *x, float *y, int n) "
       "{ for (int r = 0; r < REPEAT; r++) for (int i = 0; i < n; i++) y[i] = x[i] * 2.0f; }")
def launch_t(rt, k, x, y, n, *, stream=None):
    rt.launch(k, x, y, n, stream=stream)
T = Tunable(name="t", launch=launch_t, candidates={
    f"c{i}": Kernel(SRC, "scale", "PPi", defines={"REPEAT": 1 + 3000 * i}, name="scale")
    for i in range(2)})
def workload(rt):
    x = rt.upload(np.arange(256, dtype=np.float32))
    y = rt.buffer(256, "float32")
    rt.tune(T, x, y, 256)
"""


def test_a_foreign_tune_row_stamped_in_the_future_is_measured_again_not_signed(
    warm: Warm, tmp_path: Path
) -> None:
    workload, bundle, key = tmp_path / "w.py", tmp_path / "b.warm", tmp_path / "k"
    workload.write_text(TUNED)
    assert warm("keygen", key).returncode == 0
    first = warm("run", workload, "-b", bundle, "-q", "--key", key)
    assert first.returncode == 0, first.stderr
    with sqlite3.connect(bundle) as conn:  # the same pick, measured elsewhere, "in 2096"
        conn.execute("UPDATE tunes SET seconds = 777.0, measured_at = 1.0, updated = 4e9")
    conn.close()
    trusting = Warm(dict(warm.env, WARM_TRUSTED_KEYS=f"{key}.pub"))
    again = trusting("run", workload, "-b", bundle, "-q", "--key", key)
    assert again.returncode == 0, again.stderr
    assert "and 1 new tune(s)" in again.stdout, again.stdout  # measured here, stored
    with sqlite3.connect(bundle) as conn:
        seconds, updated = conn.execute("SELECT seconds, updated FROM tunes").fetchone()
    conn.close()
    assert seconds != 777.0 and updated < 4e9  # this run's row, which its key signed
