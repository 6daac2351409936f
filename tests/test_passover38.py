"""What `warm run`'s start-up cuts (passover38) must leave as it was.

The `warm` process pauses Python's cyclic garbage collector while it imports the CLI and
the command's modules, then freezes what they made and turns it on again
(`warmcli.__main__`, `warmcli.cli.main`). A workload must not see the difference: in the
worker `warm run` forks (every pass) the collector is on and collects the cycles the
workload makes, as in a process of its own. Real CLI in a subprocess, the real cc.
"""

from __future__ import annotations

import json
from pathlib import Path

from conftest import Warm

WORKLOAD = r"""
import gc, json, os
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void fill(float *o, int n) { for (int i = 0; i < n; i++) o[i] = 2.0f; }", "fill", "Pi")
class Cycle:
    def __init__(self):
        self.me = self
def workload(rt):
    seen = []
    for _ in range(3):
        Cycle()  # garbage only the cyclic collector frees
    seen.append({"enabled": gc.isenabled(), "collected": gc.collect() >= 1})
    with open(os.environ["SEEN"], "a") as fh:
        fh.write(json.dumps(seen[0]) + "\n")
    o = rt.buffer(4, "float32")
    rt.launch(K, o, 4)
    return o
"""


def test_every_pass_runs_with_the_collector_on(warm: Warm, tmp_path: Path) -> None:
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD)
    seen = tmp_path / "seen.jsonl"
    warm.env = dict(warm.env, SEEN=str(seen))
    done = warm("run", workload, "-b", tmp_path / "b.warm", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["verified"] is True
    passes = [json.loads(line) for line in seen.read_text().splitlines()]
    assert len(passes) == 3  # CompileOnly, CompileAndAutotune, the verify pass
    assert all(p == {"enabled": True, "collected": True} for p in passes), passes


def test_a_command_fails_as_before_with_the_collector_paused(warm: Warm, tmp_path: Path) -> None:
    """A usage error is still one line and exit 2, its JSON on stdout (the pause changes
    nothing a command says)."""
    done = warm("run", tmp_path / "missing.py", "--json")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert json.loads(done.stdout)["exit"] == 2


def test_a_runs_counts_are_the_json_asdict_made_without_making_dataclass_code() -> None:
    """`warm run --json`'s counts per pass: each statistics record's fields, its `misses`
    a mapping of its own, as `dataclasses.asdict` gave them; made without the dataclass
    code `asdict` had generated for every statistics class on a run's first document
    (3.4 ms of a `warm run --json`, in the worker). Pure logic: a fresh process."""
    code = r"""
import dataclasses, json
from warmcli.execution.statistics import (
    AutotuneStatistics, CompilationStatistics, DeviceStatistics, ExecutionStatistics)
from warmcli.cli.render.run import stats_json
stats = DeviceStatistics(
    CompilationStatistics(registered=6, compiled=5, failed=1, seconds=0.25,
                          misses={"compiler changed": 2}),
    AutotuneStatistics(registered=3, measured=3, misses={"shape": 1}),
    ExecutionStatistics(executed=9, discarded_reads=1))
made = stats_json(stats)
generated = any("__dataclass_fields__" in vars(c) for c in
                (CompilationStatistics, AutotuneStatistics, ExecutionStatistics))
made["compilation"]["misses"]["x"] = 1  # its own mapping: the record's is untouched
print(json.dumps({"made": made, "generated": generated,
                  "kept": stats.compilation.misses,
                  "asdict": {v: dataclasses.asdict(getattr(stats, v))
                             for v in ("compilation", "autotune", "execution")}}))
"""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout)
    assert got["generated"] is False
    assert got["kept"] == {"compiler changed": 2}
    made, asdict = got["made"], got["asdict"]
    del made["compilation"]["misses"]["x"]
    assert made == {
        "compilation": {**asdict["compilation"], "settled": 6},
        "autotune": {**asdict["autotune"], "settled": 3},
        "execution": asdict["execution"],
    }
    assert list(made["compilation"]) == [*asdict["compilation"], "settled"]  # its order
