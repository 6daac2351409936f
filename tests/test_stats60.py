"""stats60: do warm's statistics and reports tell the truth? Each test counts what happened itself.

Real parts: the real C compiler, real SQLite bundles, production processes in a fresh Python,
the real CLI in a subprocess.
"""

from __future__ import annotations

from pathlib import Path

from conftest import Warm

# A production process with no bundle tunes three candidates (one that fails to compile): each
# candidate compiles at its first launch, inside the tune. It prints the tune's wall time and the
# statistics' compile and measuring seconds.
COLD_TUNE = """
import json, time, numpy as np, warmcli
from warmcli import Kernel, Tunable, StatisticsReader
from warmcli.execution import default_collector
SRC = "void tq(float *x, int n) { for (int i = 0; i < n; i++) x[i] = x[i] * F; }"
CANDIDATES = {f"f{i}": Kernel(SRC, "tq", "Pi", defines={"F": i}) for i in (1, 2, 3)}
CANDIDATES["bad"] = Kernel("void tq(float *x, int n) { not C; }", "tq", "Pi")
T = Tunable(name="tq", candidates=CANDIDATES,
            launch=lambda rt, k, y, n, stream=None: rt.launch(k, y, n, stream=stream))
rt = warmcli.runtime("host")
y = rt.upload(np.zeros(32, dtype=np.float32))
begun = time.perf_counter()
rt.tune(T, y, 32)
wall = time.perf_counter() - begun
read = StatisticsReader(default_collector())
print(json.dumps({"wall": wall, "compile": read.compilation.seconds,
                  "tune": read.autotune.seconds, "compiled": read.compilation.compiled,
                  "failed": read.compilation.failed, "measured": read.autotune.measured}))
"""


def test_a_cold_tune_counts_its_candidates_compile_once(warm: Warm) -> None:
    """Before: a tune measured in an executing process compiled each candidate at its first
    launch inside the span `AutotuneStatistics.seconds` times, so the compile was counted twice,
    as compilation and as measurement (compile 0.92 s + tune 1.03 s of a 1.10 s tune). Now the
    measuring seconds leave out what obtaining the candidates took: the two are disjoint parts
    of the tune's span, whose sum never exceeds it (an invariant, not a speed target)."""
    doc = warm.production(COLD_TUNE)
    assert (doc["compiled"], doc["failed"], doc["measured"]) == (3, 1, 1), doc
    assert doc["compile"] > 0 and doc["tune"] > 0, doc
    assert doc["compile"] + doc["tune"] <= doc["wall"], doc


# A production process whose first compile a Ctrl-C cuts short (the C compiler stands in for a
# long one: its first run sends SIGINT to the process and waits to be ended), as in a REPL, and
# whose first tune a Ctrl-C cuts short (its launch function is interrupted once); each is done
# again at once, as the session's next cell would.
INTERRUPTED_AGAIN = """
import json, sys, numpy as np, warmcli
from warmcli import Kernel, Tunable, StatisticsReader
from warmcli.execution import default_collector
rt = warmcli.runtime("host")
x = rt.upload(np.zeros(8, dtype=np.float32))
K = Kernel("void kc(float *x, int n) { }", "kc", "Pi")
for _ in range(2):
    try:
        rt.launch(K, x, 8)
    except KeyboardInterrupt:
        print("compile interrupted", file=sys.stderr)
calls = [0]
def launch(rt, k, y, n, stream=None):
    calls[0] += 1
    if calls[0] == 3:
        raise KeyboardInterrupt
    rt.launch(k, y, n, stream=stream)
SRC = "void ti(float *x, int n) { (void)F; }"
T = Tunable(name="ti", launch=launch,
            candidates={f"f{i}": Kernel(SRC, "ti", "Pi", defines={"F": i}) for i in (1, 2)})
for _ in range(2):
    try:
        rt.tune(T, x, 8)
    except KeyboardInterrupt:
        print("tune interrupted", file=sys.stderr)
read = StatisticsReader(default_collector())
c, a = read.compilation, read.autotune
print(json.dumps({"report": str(warmcli.report()),
                  "kernels": [c.registered, c.compiled, c.abandoned, c.settled],
                  "tunes": [a.registered, a.measured, a.abandoned, a.settled]}))
"""

# WARM_CC: cc, but its first compile sends SIGINT to the process named by WARM_TEST_PID.
INTERRUPTING_CC = """#!/bin/sh
case "$*" in *--version*|*-dumpmachine*|*-print-*) exec cc "$@";; esac
if [ ! -e "$0.once" ]; then
    : > "$0.once"; kill -INT "$WARM_TEST_PID"; sleep 30
fi
exec cc "$@"
"""


def test_what_a_ctrl_c_cut_short_and_was_done_again_is_counted_done(
    warm: Warm, tmp_path: Path
) -> None:
    """Before: a kernel whose compile a Ctrl-C cut short stayed `abandoned` once its next launch
    compiled it (compiled 0, abandoned 1, with `report()` naming it compiled), and a tune
    measured again after a Ctrl-C stayed `abandoned` (measured 0, abandoned 1, with `report()`
    naming its pick). Now each is counted as it ended: compiled 1 and measured 1, none
    abandoned, settled == registered."""
    cc = tmp_path / "cc.sh"
    cc.write_text(INTERRUPTING_CC)
    cc.chmod(0o755)
    code = f"import os; os.environ['WARM_TEST_PID'] = str(os.getpid())\n{INTERRUPTED_AGAIN}"
    doc = warm.with_env(WARM_CC=str(cc), WARM_BUNDLE="").production(code)
    assert (cc.parent / "cc.sh.once").exists(), "the first compile was interrupted"
    assert "kernel kc on host" in doc["report"] and "picked f" in doc["report"], doc
    assert doc["kernels"] == [3, 3, 0, 3], doc  # kc, then the tune's two candidates
    assert doc["tunes"] == [1, 1, 0, 1], doc


def test_the_compile_bar_ends_full_where_a_kernel_failed(warm: Warm, tmp_path: Path) -> None:
    """Before: a batch of 12 kernels of which one failed to compile (a tune's candidate) left
    `warm run`'s compile bar at 11/12, as if a kernel were still compiling, while the tuning
    bar counts a candidate that failed as done (8/8: 6 measured, 2 failed). Now a kernel that
    failed is done too: 12/12. The pass's real counts, from `warm run --json`, drawn by the
    bars' own code."""
    from io import StringIO

    from rich.console import Console

    from warmcli.cli.progress import RunProgress
    from warmcli.execution.statistics import StatisticsCollector

    workload = tmp_path / "w.py"
    workload.write_text(FAILING_CANDIDATE)
    doc = warm.json("run", workload, "-b", tmp_path / "b.warm")
    first, second = (p["compilation"] for p in doc["passes"][:2])
    assert (first["queued"], second["compiled"], second["failed"]) == (3, 2, 1), doc
    counted = [StatisticsCollector(), StatisticsCollector()]
    for collector, p in zip(counted, doc["passes"][:2], strict=True):
        for view in ("compilation", "autotune"):
            for name, value in p[view].items():
                if isinstance(value, int) and name not in ("settled",):
                    collector.count("host", view, name, value)
    console = Console(file=StringIO(), force_terminal=True, width=120)
    with RunProgress(console, interval=0.01) as progress:
        progress("CompileOnly", counted[0].reader())
        progress("CompileAndAutotune", counted[1].reader())
        progress.refresh()
        bars = {t.description: (t.completed, t.total) for t in progress._progress.tasks}
    assert bars["CompileAndAutotune: kernels compiled"] == (3, 3), bars
    assert bars["CompileAndAutotune: candidates measured"] == (3, 3), bars


# A tunable of three candidates, one of which fails to compile.
FAILING_CANDIDATE = """
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
SRC = "void tf(float *x, int n) { (void)F; }"
T = Tunable(name="tf", launch=lambda rt, k, y, n, stream=None: rt.launch(k, y, n, stream=stream),
            candidates={"a": Kernel(SRC, "tf", "Pi", defines={"F": 1}),
                        "b": Kernel(SRC, "tf", "Pi", defines={"F": 2}),
                        "bad": Kernel("void tf(float *x, int n) { not C; }", "tf", "Pi")})
def workload(rt):
    rt.tune(T, rt.upload(np.zeros(8, dtype=np.float32)), 8)
"""


def test_every_time_warm_stats_shows_names_its_unit(warm: Warm, tmp_path: Path) -> None:
    """Before: a kernel's compile time was a bare `0.046` under `compile` (seconds? ms?),
    beside a tune's `86.5 µs` and a pass's `0.605 s`. Now it says its unit: `0.046 s`, the
    figure `--json`'s `seconds` gives."""
    workload = tmp_path / "w.py"
    workload.write_text(FAILING_CANDIDATE)
    bundle = tmp_path / "b.warm"
    assert warm("run", workload, "-b", bundle, "-q").returncode == 0
    kernels = {k["key"][:8]: k["seconds"] for k in warm.json("stats", bundle)["kernels"]}
    rows = [line.split() for line in warm("stats", bundle).stdout.splitlines()]
    listed = [row for row in rows if any(key in row for key in kernels)]
    assert len(listed) == len(kernels) == 2, rows
    for row in listed:
        key = next(k for k in kernels if k in row)
        assert row[row.index(key) - 2 : row.index(key)] == [f"{kernels[key]:.3f}", "s"], row


# A session's cell run twice: `use_bundle` again closes the runtime of the first run, and the
# new runtime compiles the kernel and measures the tune the bundle lacks again.
CELL_RUN_TWICE = """
import json, sys, numpy as np, warmcli
from warmcli import Kernel, Tunable, StatisticsReader
from warmcli.execution import default_collector
SRC = "void tw(float *x, int n) { (void)F; }"
T = Tunable(name="tw", launch=lambda rt, k, y, n, stream=None: rt.launch(k, y, n, stream=stream),
            candidates={f"f{i}": Kernel(SRC, "tw", "Pi", defines={"F": i}) for i in (1, 2)})
K = Kernel("void again(float *x, int n) { }", "again", "Pi")
for _ in range(2):
    warmcli.use_bundle(sys.argv[1])
    rt = warmcli.runtime("host")
    x = rt.upload(np.zeros(8, dtype=np.float32))
    rt.launch(K, x, 8)
    rt.tune(T, x, 8)
read = StatisticsReader(default_collector())
c, a = read.compilation, read.autotune
print(json.dumps({"kernels": [c.registered, c.compiled, c.batches, sum(c.misses.values())],
                  "tunes": [a.registered, a.measured, sum(a.misses.values())]}))
"""


def test_a_cell_run_again_counts_what_its_new_runtime_compiled(warm: Warm, tmp_path: Path) -> None:
    """Before: a cell calling `use_bundle` run twice compiled the kernel its bundle lacks twice
    (two batches, two misses) and measured the tune twice, but the statistics counted one of
    each (registered 1, compiled 1, with batches 2 and misses 2: the collector had seen the
    key, from the closed runtime). Now a closed runtime's keys count again for the new one:
    3 kernels compiled twice each (the kernel and the tune's two candidates), 6 batches."""
    workload = tmp_path / "w.py"
    workload.write_text(FAILING_CANDIDATE)
    bundle = tmp_path / "b.warm"
    assert warm("run", workload, "-b", bundle, "-q").returncode == 0
    doc = warm.production(CELL_RUN_TWICE, bundle)
    assert doc["kernels"] == [6, 6, 6, 6], doc
    assert doc["tunes"] == [2, 2, 2], doc


# Four plain kernels and a tunable's three candidates, all built in one batch (`--jobs 1`): one
# binary that seven kernels share, the candidates last in the listing.
SHARED_BATCH = """
import numpy as np
from warmcli import Kernel, Tunable
DEVICE = "host"
PLAIN = [Kernel("void a%d(float *x, int n) { x[0] = %d; }" % (i, i), "a%d" % i, "Pi")
         for i in range(4)]
SRC = "void zt(float *x, int n) { x[0] = F; }"
T = Tunable(name="zt", launch=lambda rt, k, y, n, stream=None: rt.launch(k, y, n, stream=stream),
            candidates={f"f{i}": Kernel(SRC, "zt", "Pi", defines={"F": i}) for i in (1, 2, 3)})
def workload(rt):
    x = rt.upload(np.zeros(8, dtype=np.float32))
    for k in PLAIN:
        rt.launch(k, x, 8)
    rt.tune(T, x, 8)
"""


def test_explain_gives_each_kernel_the_share_the_whole_listing_gives_it(
    warm: Warm, tmp_path: Path
) -> None:
    """Before: a binary's bytes its users split unevenly (its size % users) went to the first
    users *listed*, so `warm stats --explain` gave its operation's kernels other shares than
    `warm stats` did (tk[F=3]: 2,117 bytes explained, 2,116 in the full listing). Now each
    kernel has one share, the full listing's, in both (and in their --json)."""
    workload = tmp_path / "w.py"
    workload.write_text(SHARED_BATCH)
    bundle = tmp_path / "b.warm"
    assert warm("run", workload, "-b", bundle, "--jobs", "1", "-q").returncode == 0
    everything = {k["key"]: k for k in warm.json("stats", bundle)["kernels"]}
    assert {k["shared_by"] for k in everything.values()} == {7}, everything
    size = next(iter(everything.values()))["blob_bytes"]
    assert sum(k["bytes"] for k in everything.values()) == size
    explained = warm.json("stats", bundle, "--explain", "zt")["kernels"]
    assert len(explained) == 3
    for k in explained:
        assert k["bytes"] == everything[k["key"]]["bytes"], (k["label"], size % 7)
