"""Review of stop 41's leftovers (a thread that launches after its pass ended): what a pass
waits for before the pass ends, as Python waits for it before a process ends. The real CLI
in a subprocess, real SQLite files, the real C compiler.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# A task submitted to a pool and left running when workload() returns: Python's exit waits
# for it (concurrent.futures joins its workers once they ran what was submitted), so what it
# launches is the workload's. warm waited for no worker of a pool, busy or idle: the task's
# launch landed in a later pass, on a runtime retired or over a closed bundle.
POOL_TASK = """
import concurrent.futures, time
from warmcli import Kernel
POOL = concurrent.futures.ThreadPoolExecutor(2)
def workload(rt):
    k = Kernel("void late(int *x) { x[0] = 7; }", "late", "P")
    def task():
        time.sleep(0.3)
        rt.launch(k, rt.buffer(1, "int32"))
    POOL.submit(task)
"""

# A thread the workload left running starts another (not a daemon) before it ends: Python
# waits for that one too; warm waited only for those running as workload() returned.
NESTED = """
import threading, time
from warmcli import Kernel
def workload(rt):
    k = Kernel("void nested(int *x) { x[0] = 3; }", "nested", "P")
    def inner():
        time.sleep(0.3)
        rt.launch(k, rt.buffer(1, "int32"))
    def outer():
        time.sleep(0.1)
        threading.Thread(target=inner, name="inner").start()
    threading.Thread(target=outer, name="outer").start()
"""

# A thread (not a daemon) a daemon thread starts, still starting as workload() returns: it is
# listed by threading.enumerate() before it started, and `join` raised 'cannot join thread
# before it is started', said as the workload's error (exit 2). Its start is slowed here
# (its `_bootstrap`) to hold the window that a compile pool's start opened by chance.
STARTING = """
import threading, time
from warmcli import Kernel
class Slow(threading.Thread):
    def _bootstrap(self):
        time.sleep(0.4)
        super()._bootstrap()
def workload(rt):
    k = Kernel("void starting(int *x) { x[0] = 5; }", "starting", "P")
    def late():
        rt.launch(k, rt.buffer(1, "int32"))
    slow = lambda: Slow(target=late, name="slow", daemon=False).start()
    threading.Thread(target=slow, daemon=True).start()
    time.sleep(0.1)
"""


def _stored(bundle: Path) -> list[str]:
    with sqlite3.connect(bundle) as db:
        return sorted(r[0] for r in db.execute("SELECT entry FROM kernels"))


def _warmed(warm: Warm, path: Path, bundle: Path, entry: str) -> None:
    run = warm("run", path, "-b", bundle, "-d", "host", "--json")
    said = run.stdout + run.stderr
    assert run.returncode == 0, said
    assert "corrupt" not in said and "stopped there" not in said, said
    assert _stored(bundle) == [entry], said
    assert json.loads(run.stdout)["missing"] == [], said


def test_a_pool_task_left_running_is_waited_for_as_python_does(
    warm: Warm, workload_file: Path, tmp_path: Path
) -> None:
    _warmed(warm, workload_file(POOL_TASK), tmp_path / "pool.warm", "late")


def test_a_thread_started_by_a_thread_left_running_is_waited_for(
    warm: Warm, workload_file: Path, tmp_path: Path
) -> None:
    _warmed(warm, workload_file(NESTED), tmp_path / "nested.warm", "nested")


def test_a_thread_still_starting_as_the_workload_returns_is_no_workload_error(
    warm: Warm, workload_file: Path, tmp_path: Path
) -> None:
    _warmed(warm, workload_file(STARTING), tmp_path / "starting.warm", "starting")


def test_a_bundles_huge_header_lists_cost_a_miss_little() -> None:
    """Pure logic: a headers miss read every nearest held build's `header_files` whole (a
    bundle's text, up to the 4 MiB of its components), again at each miss, even where this
    process keeps no list to compare: 20 builds of 3 MB lists malformed at their end took
    seconds a miss. A list far longer than warm writes (512 headers) names nothing, and a
    few held builds are looked at."""
    from counted_calls import counted

    from warmcli.runtime.shown import changed_headers

    bad = json.dumps([["x" * 10, "y" * 10]] * 100_000 + [[1, 2]])
    long = json.dumps([[f"h{i}.h", "0" * 16] for i in range(110_000)])
    ours = {"header_files": json.dumps([["gain.h", "1" * 16]])}
    for text in (bad, long):
        held = [{"header_files": text}] * 20
        with counted() as calls:
            assert changed_headers(held, ours) == ""
            assert changed_headers(held, {}) == ""
        # our list parsed alone, its builds' (over what warm writes) not; 4 builds looked at
        looked = calls["_files"] - 2  # (ours, and {}'s none)
        assert (calls["JSONDecoder.raw_decode"], looked) == (1, 4), calls  # (unbounded: 21, 20)
    # a list as warm writes it still names what changed, past a malformed one
    sound = json.dumps([["gain.h", "0" * 16]])
    held = [{"header_files": "["}, {"header_files": sound}]
    assert changed_headers(held, ours) == " (changed: gain.h)"


# A service's worker thread (a daemon), made at the first call and kept for the next ones,
# launching with the runtime of that call: under warm it serves the later passes too. It was
# stopped at its first launch after the warming passes ended (a kernel those passes built and
# loaded), so the verify pass waited for its answer forever (here 5 s, then exit 2).
SERVER = """
import threading, queue
from warmcli import Kernel
SERVER = []
K = Kernel("void s(int *x) { x[0] = 1; }", "s", "P")
def workload(rt):
    if not SERVER:
        asked, answers = queue.Queue(), queue.Queue()
        def serve():
            while True:
                asked.get()
                rt.launch(K, rt.buffer(1, "int32"))
                answers.put(1)
        threading.Thread(target=serve, name="server", daemon=True).start()
        SERVER.append((asked, answers))
    asked, answers = SERVER[0]
    asked.put(1)
    answers.get(timeout=5)
"""


def test_a_service_thread_serving_what_its_passes_built_goes_on_after_them(
    warm: Warm, workload_file: Path, tmp_path: Path
) -> None:
    _warmed(warm, workload_file(SERVER), tmp_path / "server.warm", "s")
    # one that tunes: the shape its passes measured is served it as it was
    tuned = SERVER.replace("from warmcli import Kernel", "from warmcli import Kernel, Tunable")
    tuned = tuned.replace(
        'rt.launch(K, rt.buffer(1, "int32"))',
        "rt.tune(Tunable('t', {'a': K, 'b': K2}, lambda rt, c, x, *, stream=None: "
        "rt.launch(c, x, stream=stream)), rt.buffer(1, 'int32'))",
    )
    tuned = tuned.replace(
        "SERVER = []", "SERVER = []\nK2 = Kernel('void s2(int *x) { x[0] = 1; }', 's2', 'P')"
    )
    assert "rt.tune(" in tuned and "K2 =" in tuned
    run = warm("run", workload_file(tuned, "tuned.py"), "-b", tmp_path / "t.warm", "-d", "host")
    said = run.stdout + run.stderr
    assert run.returncode == 0 and "stopped there" not in said, said
    assert "stored 2 new kernel(s) and 1 new tune(s)" in said, said


def test_what_is_kept_goes_before_the_colon_that_opens_a_compile_log() -> None:
    """Pure logic, a fake report: a workload's compile error's headline ends with a colon
    opening the compiler's log below; the kept clause went after it ('failed to compile:;
    2 kernel(s) ...'), and `--json`'s error (the headline) no longer ended as it did."""
    from types import SimpleNamespace

    from warmcli.errors import WorkloadError
    from warmcli.warming.sealing import kept_after

    fake = SimpleNamespace(bundle=Path("b.warm"), stored_kernels=2, stored_tunes=0)
    said = str(kept_after(WorkloadError("w.py:3: kernel k failed to compile:\nk.c:1: error"), fake))
    kept = "2 kernel(s) and 0 tune(s) stored in b.warm before it are kept"
    assert said == f"w.py:3: kernel k failed to compile; {kept}:\nk.c:1: error", said
    said = str(kept_after(WorkloadError("w.py:3: ValueError: bad\nmore"), fake))
    assert said == f"w.py:3: ValueError: bad; {kept}\nmore", said


ABSOLUTE = """
from warmcli import Kernel
K = Kernel('#include "{path}"\\nvoid g(float *x) {{ x[0] = GAIN; }}', "g", "P")
def workload(rt):
    rt.launch(K, rt.buffer(1))
"""


def test_a_header_included_by_absolute_path_ships_no_folder(
    warm: Warm, workload_file: Path, tmp_path: Path
) -> None:
    """README: the folders a build read headers from are not in its bundle; the names a
    headers miss shows keep an absolute include's file name only."""
    secret = tmp_path / "home-of-someone" / "private"
    secret.mkdir(parents=True)
    (secret / "gain.h").write_text("#define GAIN 2\n")
    path = workload_file(ABSOLUTE.format(path=secret / "gain.h"))
    bundle = tmp_path / "abs.warm"
    run = warm("run", path, "-b", bundle, "-q", cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    conn = sqlite3.connect(bundle)
    (components,) = conn.execute("SELECT components FROM kernels").fetchone()
    conn.close()
    assert "home-of-someone" not in components and "gain.h" in components, components
    (secret / "gain.h").write_text("#define GAIN 3\n")
    proc = warm("verify", bundle, "--workload", path, cwd=tmp_path)
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("miss: kernel g: headers:")]
    assert line.endswith("(changed: gain.h)"), line
