"""Trial 51b: a fleet sharing one bundle, tried from the README alone (stop 51), with a fresh
`HOME` and `WARM_HOME` per machine: 20 production processes starting at once while a `warm
run` wrote into their bundle (and 20 writing back at once), a pre-fork server's workers,
a bundle on a read-only mount, a bundle by URL (HTTP on 127.0.0.1 and moto's S3), a signed
bundle with one row changed, shards merged in three orders, a suite warmed, a CI cache
restored at another path: every process computed a cold one's bits. What it found:

- a bundle copied over in place (`cp NEW PATH`, where the README named only `warm pull` and
  `mv`) is the very file every process has open, emptied and rewritten: a process starting
  during the copy raised `BundleError` (`not a warm bundle (an empty file)`, `corrupt
  bundle`), one running missed what it had not read (the same bits) and then read the new
  bundle, where the README said running processes go on with the file they had open. The
  README now says so, and to replace a bundle by a rename only.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from conftest import ROOT
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# A production process's start over argv[1]: `run` launches one of the host example's
# kernels on fixed inputs and gives what it read back.
PRELUDE = """
import json, sys, numpy as np, warmcli
from examples.matmul_host import BIAS_RELU, MATMUL, ROW_SUM
path = sys.argv[1]
data = open(path, "rb").read()

def run(rt, kernel):
    c = rt.upload(np.arange(12, dtype=np.float32).reshape(3, 4) - 5)
    if kernel is BIAS_RELU:
        rt.launch(kernel, c, rt.upload(np.ones(4, np.float32)), 3, 4)
        return rt.read(c).tobytes().hex()
    o = rt.upload(np.zeros(3, np.float32))
    rt.launch(kernel, c, o, 3, 4)
    return rt.read(o).tobytes().hex()

def opened():
    try:
        warmcli.use_bundle(path)
        return "opened"
    except warmcli.errors.BundleError as e:
        return str(e)

warmcli.use_bundle(path)
rt = warmcli.runtime("host")
out = {"served": [run(rt, BIAS_RELU)]}
"""

# Its bundle `cp`-ed over in place (emptied, then written from its start) as it runs: what a
# process starting then opens, and, its runtime kept, what it reads on; a cold run beside.
COPIED_IN_PLACE = (
    PRELUDE
    + """
with open(path, "r+b") as f:
    f.truncate(0)
    out["empty"] = opened() if sys.argv[2] == "start" else None
    f.write(data[: len(data) // 2])
    f.flush()
    if sys.argv[2] == "start":
        out["half"] = opened()
    else:
        out["running"] = run(rt, ROW_SUM)
        out["missed"] = [m.name for m in warmcli.report().misses]
    f.seek(0)
    f.write(data)
if sys.argv[2] == "run":  # the copy whole: what it had not read is served again
    a, b, c = (rt.upload(np.ones((64, 64), np.float32)) for _ in range(3))
    rt.tune(MATMUL, a, b, c, 64, 64, 64)
    out["then_missed"] = [m.name for m in warmcli.report().misses]
out["whole"] = opened()
rt = warmcli.runtime("host")
out["served"] += [run(rt, ROW_SUM)]
out["report"] = str(warmcli.report())
warmcli.use_bundle(None)
rt = warmcli.runtime("host")
out["cold"] = [run(rt, BIAS_RELU), run(rt, ROW_SUM)]
print(json.dumps(out))
"""
)


def test_a_bundle_copied_over_in_place(warm: Any, host_bundle: Any, tmp_path: Path) -> None:
    """`cp NEW PATH` under a fleet: a process starting mid-copy raises `BundleError` (one
    line), one running misses what it had not read (the same bits); once whole, it serves.
    The README said only `warm pull` and `mv`, and that running processes go on with the
    file they had open: it now says what a copy in place does, and to rename instead."""
    bundle = host_bundle(tmp_path / "app.warm")
    got = warm.production(COPIED_IN_PLACE, bundle, "start")
    assert got["empty"] == f"{bundle}: not a warm bundle (an empty file)", got
    assert got["half"].startswith(f"{bundle}: corrupt bundle ("), got
    assert got["whole"] == "opened" and "served everything" in got["report"], got
    assert got["served"] == got["cold"], got
    running = warm.production(COPIED_IN_PLACE, host_bundle(tmp_path / "run.warm"), "run")
    assert running["running"] == got["cold"][1] and running["missed"] == ["row_sum"], running
    assert running["then_missed"] == ["row_sum"], running
    assert running["served"] == got["cold"] and "served everything" in running["report"]
    readme = " ".join((ROOT / "README.md").read_text().split())
    said = re.search(r"`cp NEW PATH`.{0,200}empties and rewrites the very file", readme)
    assert said and "(`not a warm bundle (an empty file)`" in readme
    assert "One copied over in place (`cp NEW PATH`) is that very file" in readme
