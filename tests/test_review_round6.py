"""What a README trial of the whole tool found (round 6), through the real CLI on real
files: a workload's forked child that returns from `workload()` ends there, never
running warm's passes a second time beside its parent. `REPLACED_WORKLOAD`'s bundle is
warmed once for the module and copied by each test that starts from it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import (
    ForkedWarm,
    Servers,
    forked_warm,  # noqa: F401  (conftest's `warm`, commands forked)
)

FORKS = """\
import os, sys
import numpy as np
from warmcli import Kernel

DEVICE = "host"
INC = Kernel("void inc(int *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")
DBL = Kernel("void dbl(int *x, int n) { for (int i = 0; i < n; i++) x[i] *= 2; }", "dbl", "Pi")

def workload(rt):
    x = rt.upload(np.ones(4, np.int32))
    rt.launch(INC, x, 4)
    pid = os.fork()
    if pid == 0:
        rt.launch(DBL, x, 4)  # the child's own work: not seen, not stored
        {child}
    os.waitpid(pid, 0)
"""


def test_a_forked_child_that_returns_ends_there(warm: Warm, workload_file, tmp_path: Path) -> None:
    for child, name in (
        ("return", "ret"),
        ("raise ValueError('child')", "raise"),
        ("sys.exit(3)", "exit"),
    ):
        bundle = tmp_path / f"{name}.warm"
        proc = warm("run", workload_file(FORKS.replace("{child}", child)), "-b", bundle)
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        assert proc.stdout.count("stored 1 new kernel(s)") == 1, proc.stdout
        assert "Traceback" not in proc.stderr, proc.stderr
        listed = warm("stats", bundle)
        assert "inc" in listed.stdout and "dbl" not in listed.stdout, listed.stdout


ONE = """\
import os, sys
import numpy as np
from warmcli import Kernel

DEVICE = "host"
INC = Kernel("void inc(int *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")

def workload(rt):
    rt.launch(INC, rt.upload(np.ones(4, np.int32)), 4)
    {extra}
"""


@pytest.mark.parametrize(
    "extra",
    [
        "os.closerange(1, 3)",
        "fd = os.open(os.devnull, os.O_WRONLY); os.dup2(fd, 1); os.dup2(fd, 2)",
    ],
    ids=["closed", "to-devnull"],
)
@pytest.mark.parametrize("as_json", [False, True], ids=["report", "json"])
def test_a_workload_that_closes_or_redirects_descriptors_1_and_2_still_gets_warms_output(
    warm: Warm, workload_file, tmp_path: Path, extra: str, as_json: bool
) -> None:
    """warm's report (or `--json` object) and errors go to the descriptors warm was given,
    whatever the workload did to descriptors 1 and 2."""
    script = workload_file(ONE.replace("{extra}", extra))
    proc = warm("run", script, "-b", tmp_path / "b.warm", *(["--json"] if as_json else []))
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    if as_json:
        assert json.loads(proc.stdout)["stored"]["kernels"] == 1, proc.stdout
    else:
        assert "stored 1 new kernel(s)" in proc.stdout, proc.stdout


THREAD = """\
import threading, time
from concurrent.futures import ThreadPoolExecutor
import numpy as np
from warmcli import Kernel

DEVICE = "host"
INC = Kernel("void inc(int *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "inc", "Pi")
DBL = Kernel("void dbl(int *x, int n) { for (int i = 0; i < n; i++) x[i] *= 2; }", "dbl", "Pi")

POOL = ThreadPoolExecutor(1)

def later(rt):
    time.sleep(0.3)
    rt.launch(DBL, rt.upload(np.ones(4, np.int32)), 4, stream=rt.stream())

def workload(rt):
    rt.launch(INC, rt.upload(np.ones(4, np.int32)), 4)
    threading.Thread(target=later, args=(rt,)).start()  # not joined: Python waits for it
    POOL.submit(int)  # a pool left open: its idle worker is not waited for
"""


def test_a_thread_the_workload_leaves_running_is_waited_for_as_python_does(
    warm: Warm, workload_file, tmp_path: Path
) -> None:
    """A non-daemon thread still running when `workload()` returns is one Python itself
    would wait for before the process ends: each pass waits for it, so what it launches
    is stored (it was lost while verify said the bundle complete)."""
    proc = warm("run", workload_file(THREAD), "-b", tmp_path / "b.warm")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "stored 2 new kernel(s)" in proc.stdout, proc.stdout


INDIRECT = """\
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SOURCE = "void acc(const float *s, float *d, int n) { for (int i = 0; i < n; i++) d[i] += s[i]; }"
STATE = {}

class Holder:
    def __init__(self, buffer):
        self.buffer = buffer

def launch(rt, kernel, src, held, n, *, stream=None):
    rt.launch(kernel, src, STATE["acc"], n, stream=stream)  # a buffer the app keeps
    rt.launch(kernel, src, held.buffer, n, stream=stream)  # one inside an object

T = Tunable("acc", {"a": Kernel(SOURCE, "acc", "PPi", defines={"V": 1}),
                    "b": Kernel(SOURCE, "acc", "PPi", defines={"V": 2})},
            launch, key=lambda src, held, n: str(n))

def workload(rt):
    STATE["acc"] = rt.upload(np.zeros(4, dtype=np.float32))
    STATE["held"] = Holder(rt.upload(np.zeros(4, dtype=np.float32)))
    rt.tune(T, rt.upload(np.ones(4, dtype=np.float32)), STATE["held"], 4)
"""

COMPUTE = """\
import json, sys
sys.path.insert(0, sys.argv[1])
import warmcli, indirect
rt = warmcli.runtime("host")
indirect.workload(rt)
state = indirect.STATE
print(json.dumps([float(rt.read(b)[0]) for b in (state["acc"], state["held"].buffer)]))
"""


def test_a_buffer_a_tunes_launch_writes_beside_its_inputs_is_put_back_too(
    warm: Warm, tmp_path: Path
) -> None:
    """A candidate's launch may write buffers that are not among the tune's inputs (one
    the app keeps, one inside an object): each is kept when first launched on during the
    measurement and put back after every run, so a cold start (which measures), a miss
    and a hit compute the same (1.0 each; the measured runs had added up to 13)."""
    (tmp_path / "indirect.py").write_text(INDIRECT)
    bundle = tmp_path / "b.warm"
    proc = warm("run", tmp_path / "indirect.py", "-b", bundle, "-q")
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    cold = warm.production(COMPUTE, tmp_path)  # no bundle: the tune is measured here
    hot = warm.production(COMPUTE, tmp_path, bundle=bundle)
    assert cold == hot == [1.0, 1.0], (cold, hot)


def test_two_threads_tuning_on_one_stream_each_keep_their_own_buffers() -> None:
    """Each measuring thread keeps the buffers its own launches write, while another
    thread measures on the same stream (one hook a stream let the second take it over,
    and the first's measured runs stayed in its buffer: 18.99 for one run's 1.0)."""
    import threading

    from warmcli import Kernel, ProcessMode, ProcessModeOverride, Runtime, Tunable
    from warmcli.backends.host import HostDevice

    rt = Runtime(HostDevice())
    source = (
        "void inc(float *w, int n) "
        "{ for (int r = 0; r < 2000; r++) for (int i = 0; i < n; i++) w[i] += R * 0.0005f; }"
    )
    candidates = {f"r{r}": Kernel(source, "inc", "Pi", defines={"R": r}) for r in (1, 2)}
    wa, wb = rt.buffer(8), rt.buffer(8)
    a_started, b_started = threading.Event(), threading.Event()

    def launch_a(rt: Runtime, k: Kernel, n: int, *, stream: object = None) -> None:
        if not a_started.is_set():
            a_started.set()
            assert b_started.wait(30)  # the other thread measures on the stream too
        rt.launch(k, wa, n, stream=stream)  # type: ignore[arg-type]

    def launch_b(rt: Runtime, k: Kernel, n: int, *, stream: object = None) -> None:
        b_started.set()
        rt.launch(k, wb, n, stream=stream)  # type: ignore[arg-type]

    picks: dict[str, str | None] = {}
    with ProcessModeOverride(ProcessMode.EXECUTE):
        for kernel in candidates.values():
            rt.launch(kernel, rt.buffer(8), 8)  # compiled before either measures

        def other() -> None:
            assert a_started.wait(30)
            picks["b"] = rt.tune(Tunable("b", candidates, launch_b), 8)

        thread = threading.Thread(target=other)
        thread.start()
        picks["a"] = rt.tune(Tunable("a", candidates, launch_a), 8)
        thread.join()
        for name, buffer in (("a", wa), ("b", wb)):  # one run of each pick, no more
            assert float(rt.read(buffer)[0]) == pytest.approx(int(picks[name][1:]), rel=1e-3)
    rt.close()


REPLACED_WORKLOAD = """\
import os
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
N = int(os.environ.get("WL_N", "3"))
SRC = "void scale(float *x, int n, float s) { for (int i = 0; i < n; i++) x[i] *= s; }"
SCALE = Kernel(SRC, "scale", "Pif", defines={"V": N})

def launch(rt, k, x, n, *, stream=None):
    rt.launch(k, x, n, 2.0, stream=stream)

T = Tunable("sc", {f"v{v}": Kernel(SRC, "scale", "Pif", defines={"V": v, "W": N})
                   for v in (1, 2)}, launch)

def workload(rt):
    x = rt.upload(np.arange(8, dtype=np.float32))
    rt.launch(SCALE, x, 8, 3.0)
    rt.tune(T, x, 8)
"""

SERVE_THEN_WAIT = """\
import os, sys, time
import numpy as np
import warmcli
sys.path.insert(0, sys.argv[1])
import wl
rt = warmcli.runtime()
x = rt.upload(np.arange(8, dtype=np.float32))
rt.launch(wl.SCALE, x, 8, 3.0)
open(os.path.join(sys.argv[1], "ready"), "w").close()
while not os.path.exists(os.path.join(sys.argv[1], "go")):
    time.sleep(0.02)
rt.tune(wl.T, x, 8)
print(rt.read(x).tolist())
"""

KILLED_WRITER = """\
import os, signal, sqlite3, sys
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA cache_size=1")
c.execute("BEGIN IMMEDIATE")
c.execute("UPDATE blobs SET data = zeroblob(size)")
c.execute("UPDATE kernels SET compile_log = hex(randomblob(3000))")
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture(scope="module")
def replaced_once(tmp_path_factory: pytest.TempPathFactory, forking_servers: Servers) -> Path:
    """A folder holding `wl.py` (`REPLACED_WORKLOAD`) and `b.warm`, from `warm run wl.py -b
    b.warm -q` (forked, in a home of its own) once for the module: what a test copies."""
    base = tmp_path_factory.mktemp("replaced")
    (base / "wl.py").write_text(REPLACED_WORKLOAD)
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = ForkedWarm(Warm(dict(env, WARM_HOME=str(base / "home"), COLUMNS="200")), forking_servers)
    assert warm("run", base / "wl.py", "-b", base / "b.warm", "-q").returncode == 0
    return base


def _replaced(replaced_once: Path, tmp_path: Path, name: str) -> Path:
    """`wl.py` and its bundle (as `name`, returned) in `tmp_path`, as `warm run wl.py -b
    NAME -q` there leaves them: `replaced_once`'s copied."""
    shutil.copyfile(replaced_once / "wl.py", tmp_path / "wl.py")
    return shutil.copyfile(replaced_once / "b.warm", tmp_path / name)


def test_a_write_back_process_whose_bundle_was_replaced_never_touches_the_new_files_journal(
    warm: Warm, tmp_path: Path, replaced_once: Path
) -> None:
    """A process that writes back serves a bundle that is then replaced (a merge publishes
    a new file over it), and a writer of the new file dies mid-transaction, leaving its
    journal: the serving process must not take that journal for its own (it played it
    into the old file and removed it, so the new file kept the dead writer's half-written
    blobs for good, and the serving process crashed on a 'malformed' database)."""
    import os
    import subprocess
    import sys
    import time

    bundle = _replaced(replaced_once, tmp_path, "b.warm")
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_BUNDLE_WRITE="1", WL_N="301")
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE_THEN_WAIT, str(tmp_path)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not (tmp_path / "ready").exists():
        assert server.poll() is None and time.monotonic() < deadline, server.communicate()
        time.sleep(0.02)
    copy = tmp_path / "copy.warm"
    copy.write_bytes(bundle.read_bytes())
    os.replace(copy, bundle)  # as a merge publishes its output over the bundle
    killed = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(bundle)], check=False)
    assert killed.returncode == -9 and (tmp_path / "b.warm-journal").exists()
    (tmp_path / "go").touch()
    out, err = server.communicate(timeout=120)
    assert server.returncode == 0, err
    assert out.strip() == "[0.0, 6.0, 12.0, 18.0, 24.0, 30.0, 36.0, 42.0]", (out, err)
    verified = warm("verify", bundle)
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_clean_keeps_another_toolchains_builds_where_this_machines_are_corrupt(
    warm: Warm, tmp_path: Path, replaced_once: Path
) -> None:
    """`warm clean` removes another toolchain's build as superseded only by a build of
    this machine's toolchain that can be served: superseded by corrupt ones, both went
    (6 kernels to 0), where the other toolchain's served every kernel."""
    import os
    import sqlite3
    import stat

    here = _replaced(replaced_once, tmp_path, "here.warm")  # this machine's toolchain's
    fake = tmp_path / "mycc"
    fake.write_text(
        '#!/bin/sh\nfor a in "$@"; do [ "$a" = "--version" ] && '
        '{ echo "mycc (Fake) 9.9.9"; exit 0; }; done\nexec cc "$@"\n'
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    other, both = tmp_path / "other.warm", tmp_path / "both.warm"
    mycc = warm.with_env(WARM_CC=str(fake))
    assert mycc("run", tmp_path / "wl.py", "-b", other, "-q").returncode == 0
    assert warm("merge", other, here, "-o", both).returncode == 0
    with sqlite3.connect(both) as db:
        shas = {
            r[0] for r in db.execute("SELECT sha256 FROM kernels WHERE toolchain LIKE '%mycc%'")
        }
        assert db.execute("SELECT count(*) FROM kernels").fetchone()[0] == 6
        db.execute(
            "UPDATE blobs SET data = zeroblob(size) WHERE sha256 IN "
            "(SELECT sha256 FROM kernels WHERE toolchain NOT LIKE '%mycc%')"
        )
    assert shas and os.path.getsize(both)
    proc = warm("clean", both)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with sqlite3.connect(both) as db:
        left = {r[0] for r in db.execute("SELECT sha256 FROM kernels")}
    assert left == shas, proc.stdout


def test_clean_to_a_size_never_keeps_a_tune_whose_pick_it_evicted(
    warm: Warm, tmp_path: Path, replaced_once: Path
) -> None:
    """`warm clean --max-size` evicting a tune's pick kernel removes that tune too: kept,
    `warm check` called it servable while a strict production process missed its pick."""
    import sqlite3

    from warmcli.bundle.store import Bundle

    bundle = _replaced(replaced_once, tmp_path, "b.warm")
    with Bundle.open(bundle) as opened:
        blobs = sorted({k.size for k in opened.kernels()})
        (tune,) = opened.each_tune()
        pick = next(c.kernel_key for c in tune.candidates if c.name == tune.pick)
    with sqlite3.connect(bundle) as db:  # the pick the least recently used: evicted first
        db.execute("UPDATE kernels SET last_used = 0 WHERE key = ?", (pick,))
    proc = warm("clean", bundle, "--max-size", str(sum(blobs) - 1))  # one blob must go
    assert "its pick's kernel evicted" in proc.stdout, proc.stdout
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with Bundle.open(bundle) as opened:
        held = {k.key for k in opened.kernels()}
        for t in opened.each_tune():
            pick = next(c.kernel_key for c in t.candidates if c.name == t.pick)
            assert pick in held, (t.operation, proc.stdout)
    assert warm("check", bundle).returncode == 0


def test_a_write_back_with_nothing_new_never_migrates_an_older_bundle(
    warm: Warm, tmp_path: Path, forking_servers: Servers
) -> None:
    """A process writing back that built and measured nothing leaves a format-2 bundle as
    it is (it migrated it at open only to move last-used times, so a format-2 signature
    stopped vouching for it, without a word); one that built something migrates it."""
    from test_format3 import _format2, _tune, _types

    path = tmp_path / "two.warm"
    _format2(path, [_tune(0), _tune(1)])
    env = dict(warm.env, WARM_BUNDLE=str(path), WARM_BUNDLE_WRITE="1")
    code = "import warmcli; warmcli.runtime('host'); print('served')"
    producing = forking_servers.pythons(env)  # (each process a fork: tests/forked_python.py)
    proc = producing.run(code, env=env, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == "served\n", proc.stderr
    assert _types(path)[0] == 2
    build = (
        "import numpy as np, warmcli\n"
        "rt = warmcli.runtime('host')\n"
        "k = warmcli.Kernel('void f(int *x) { x[0] = 1; }', 'f', 'P')\n"
        "rt.launch(k, rt.upload(np.zeros(1, np.int32)))\n"
    )
    proc = producing.run(build, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert _types(path)[0] > 2  # written back: migrated to write it
