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
from test_review38b import warmed_with

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
    _, seen, done = warmed_with(warm, tmp_path, WORKLOAD, "SEEN", "seen.jsonl", "--json")
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
from warmcli.execution.snapshots import (
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


# A compiler warm starts is tied to the thread that started it (a parent-death signal armed
# by a `preexec_fn`, which then checks its parent is still there: a killed warm leaves none
# running, however soon after the start it is killed).
TIED = r"""
import os, shutil, sys, threading, time
from warmcli.backends import processes
started = []
processes.on_compiler(lambda pgid, on: on and started.append(pgid))
sleep = os.path.realpath(shutil.which("sleep"))
threading.Thread(target=processes.run, args=([sleep, "60"], None), daemon=True).start()
while not started:
    time.sleep(0.01)
print(started[0], flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_child_dies_with_the_process_that_started_it_killed(tmp_path: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [sys.executable, "-c", TIED], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        assert _alive(child)
        os.kill(proc.pid, signal.SIGKILL)  # no handler runs: only the tie can stop it
        proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(child), "the child outlived the process that started it"
    finally:
        proc.kill()
        proc.wait()


def test_a_command_that_cannot_start_still_raises(tmp_path: Path) -> None:
    """A missing compiler and an executable file `execve` refuses (no `#!`) raise
    `OSError` where warm starts them, as before: never a child's exit status."""
    import pytest

    from warmcli.backends import processes

    plain = tmp_path / "plain"
    plain.write_text("echo not a binary\n")
    plain.chmod(0o755)
    for command in ([str(tmp_path / "missing")], [str(plain)]):
        with pytest.raises(OSError):
            processes.run(command, 30)


# `warm run`'s supervisor goes on once its worker has returned its code and closed its end
# of a pipe (and its output), last of all: it no longer waits for the system to tear the
# worker down (its memory map: milliseconds). The code is the journal's, as it exits with.
CHANGES = r"""
import os
from warmcli import Kernel
DEVICE = "host"
def workload(rt):
    count = os.environ["COUNT"]
    n = int(open(count).read()) if os.path.exists(count) else 0
    with open(count, "w") as fh:
        fh.write(str(n + 1))
    k = Kernel("void f(float *o) { o[0] = %d.0f; }" % n, "f", "P")  # another each pass
    rt.launch(k, rt.buffer(1, "float32"))
"""


def test_a_verify_that_misses_still_exits_1(warm: Warm, tmp_path: Path) -> None:
    workload = tmp_path / "changes.py"
    workload.write_text(CHANGES)
    warm.env = dict(warm.env, COUNT=str(tmp_path / "count"))
    done = warm("run", workload, "-b", tmp_path / "b.warm", "--json")
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["verified"] is False
    assert (tmp_path / "count").read_text() == "3"


def test_a_worker_ended_by_the_workload_is_still_said_so(warm: Warm, tmp_path: Path) -> None:
    """`os._exit` in the workload: the worker never returned its code (no let-go): one line
    naming it, exit 2, as before."""
    workload = tmp_path / "ends.py"
    workload.write_text("import os\nDEVICE = 'host'\ndef workload(rt):\n    os._exit(3)\n")
    done = warm("run", workload, "-b", tmp_path / "b.warm")
    assert done.returncode == 2
    assert "ended the process itself (exit status 3" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


# Killed as soon as the compiler has started (the observer warm journals its group with):
# util-linux's setpriv armed the parent-death signal in the child after the start had
# returned (ee6787b, reverted), so a warm killed then left the compiler running, 5 runs in
# 10 (review38b); a `preexec_fn` arms it before the command runs.
KILLED_AT_START = r"""
import os, signal, sys
from warmcli.backends import processes
def observer(pgid, on):
    if on:
        print(pgid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
processes.on_compiler(observer)
processes.run(["/bin/sleep", "30"], None)
"""


def test_a_warm_killed_as_its_compiler_starts_leaves_none_running() -> None:
    import subprocess
    import sys
    import time

    for _ in range(5):
        proc = subprocess.run(
            [sys.executable, "-c", KILLED_AT_START], capture_output=True, text=True, timeout=60
        )
        child = int(proc.stdout.split()[0])
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(child), "the compiler outlived the warm that started it"


GC_OFF_BY_CALLER = r"""
import gc, sys
gc.disable()
before = gc.get_freeze_count()  # (3.12 starts with the interpreter's own frozen: 375 on 3.12.1)
sys.argv = ["warm", "stats", sys.argv[1]]
from warmcli.cli import main
try:
    main()
except SystemExit:
    pass
print(gc.isenabled(), gc.get_freeze_count() - before)
"""


def test_a_caller_that_turned_the_collector_off_keeps_it_off(tmp_path: Path) -> None:
    """`warmcli.cli.main()` called in a process that turned the collector off itself: it
    stays off and nothing more is frozen (only `warm`'s entry point pauses it, and turns it on)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", GC_OFF_BY_CALLER, str(tmp_path / "none.warm")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.stdout.split() == ["False", "0"], done.stdout + done.stderr
