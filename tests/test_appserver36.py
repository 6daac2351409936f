"""Production inside a long-running application server (stop 36): a worker that serves a
bundle for its whole life while other processes write it, crash writing it, or replace it.

Each test is a real production process (`python -c`, a real bundle made by a real
write-back, the real cc) whose output, report and bundle are checked afterwards; what
happens to the bundle meanwhile is done by a real process at a fixed point of the worker's
life (a line of its code), so no test depends on timing. The production processes are
forks of one that imported numpy and warmcli (`tests/forked_python.py`): what they print,
report and leave in the bundle is the point, not how they start; the made bundle is made
once for the module and copied for each test that serves it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, Warm, scaled
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from forked_python import ForkedPython

# A service: `argv[1]` the bundle, `argv[2]` `make` (write every miss back: makes the
# bundle), else `serve`: request 0 is served, then the command in `argv[3:]` runs (another
# process, at that point of the worker's life), then requests 1..5, each a kernel and a
# tune of their own that the worker has not read yet; prints a digest of what each computed.
SERVICE = (
    """
import hashlib, subprocess, sys
import numpy as np
import warmcli
from warmcli import Kernel, Tunable
"""
    + scaled(6)
    + """
warmcli.use_bundle(sys.argv[1], write=sys.argv[2] == "make")
rt = warmcli.runtime("host")
h = hashlib.sha256(one(rt, 0))
if sys.argv[3:]:
    subprocess.run(sys.argv[3:])
for i in range(1, 6):
    h.update(one(rt, i))
print(h.hexdigest())
"""
)

# A writer SIGKILLed inside its transaction (a `WARM_BUNDLE_WRITE=1` worker recycled by
# SIGKILL while it wrote back): its pages spilled into the bundle, its journal left hot.
CRASHED_WRITER = """
import os, signal, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA cache_size = 1")  # spill: the bundle itself holds the half-written pages
conn.execute("BEGIN IMMEDIATE")
conn.execute("UPDATE kernels SET seconds = seconds + 1")
conn.execute("DELETE FROM blobs")
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture(scope="module")
def python() -> Iterator[ForkedPython]:
    """The module's production processes, each a fork of one that imported numpy and
    warmcli; its environment is conftest's `warm`'s apart from its home (the scripts' own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    server = ForkedPython(dict(env, COLUMNS="200"), ROOT)
    yield server
    server.close()


def _script(
    python: ForkedPython, warm: Warm, code: str, *args: str | Path, **env: str
) -> subprocess.CompletedProcess[str]:
    """`python -c code args` in `warm`'s environment (and `env`), in the repository's root."""
    return python.run(code, *map(str, args), env=dict(warm.env, **env), cwd=ROOT, timeout=300)


def _service(
    python: ForkedPython, warm: Warm, *args: str | Path, **env: str
) -> subprocess.CompletedProcess[str]:
    return _script(python, warm, SERVICE, *args, **env)


@pytest.fixture(scope="module")
def made_app(python: ForkedPython, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A bundle made by a write-back of every request, once; and what a cold process computes."""
    base = tmp_path_factory.mktemp("app")
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    warm = Warm(dict(env, WARM_HOME=str(base / "home"), COLUMNS="200"))
    bundle = base / "app.warm"
    proc = _service(python, warm, bundle, "make")
    assert proc.returncode == 0, proc.stderr
    return bundle, proc.stdout


def _made(made_app: tuple[Path, str], bundle: Path) -> str:
    """`bundle`, a copy of the module's made one; returns what a cold process computes."""
    shutil.copyfile(made_app[0], bundle)
    return made_app[1]


def test_a_worker_serving_when_a_writer_crashed_mid_write_still_serves_the_bundle(
    python: ForkedPython, warm: Warm, tmp_path: Path, made_app: tuple[Path, str]
) -> None:
    # A worker that had the bundle open when another process died inside its write-back
    # (SIGKILL, leaving a hot journal) read nothing more for the rest of its life: every
    # kernel and tune it had not read yet was "corrupt: bundle's entry: cannot write the
    # bundle (attempt to write a readonly database)", compiled and tuned cold, and
    # WARM_REPORT told to re-warm a bundle that held them all (a new process served it all).
    bundle = tmp_path / "app.warm"
    cold = _made(made_app, bundle)
    crash = [sys.executable, "-c", CRASHED_WRITER, str(bundle)]
    proc = _service(python, warm, bundle, "serve", *crash, WARM_REPORT="1", WARM_EXPLAIN="1")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == cold
    assert "corrupt" not in proc.stderr and "Traceback" not in proc.stderr
    assert "served everything: compiled 0 kernels, tuned 0 operations" in proc.stderr
    assert not Path(f"{bundle}-journal").exists()  # rolled back, as a new process does
    assert "sound" in warm("verify", bundle).stdout


# Six request threads tune one new shape at once: the tunable's key function (public API)
# holds each until all six have asked, so all six meet the miss together.
SIX_AT_ONCE = (
    """
import sys, threading
from concurrent.futures import ThreadPoolExecutor
import numpy as np
import warmcli
from warmcli import Kernel, Tunable
from warmcli.execution import default_collector
"""
    + scaled(1)
    + """
meet = threading.Barrier(6)
def key(x, z, n):
    meet.wait(timeout=120)
    return n
TK = Tunable(name="t", candidates=T.candidates, launch=launch_t, key=key)
warmcli.use_bundle(sys.argv[1])
rt = warmcli.runtime("host")
def request(_):
    x = rt.upload(np.arange(77, dtype=np.float32) / 7)
    z = rt.buffer(77, "float32")
    rt.tune(TK, x, z, 77)
    return rt.read(z).tobytes()
with ThreadPoolExecutor(6) as pool:
    assert len(set(pool.map(request, range(6)))) == 1
misses = default_collector().reader().total().autotune.misses
print(dict(misses))
"""
)


def test_a_miss_six_request_threads_meet_at_once_is_explained_and_counted_once(
    python: ForkedPython, warm: Warm, tmp_path: Path, made_app: tuple[Path, str]
) -> None:
    # A tune that six request threads of a worker asked for at once was explained six times
    # (six `warm: miss:` lines under WARM_EXPLAIN, six `warm: strict:` under warn) and
    # counted six times in the miss statistics, though "each key is explained once".
    bundle = tmp_path / "app.warm"
    _made(made_app, bundle)
    for strict, line in (("0", "warm: miss: tune"), ("warn", "warm: strict: tune")):
        proc = _script(python, warm, SIX_AT_ONCE, bundle, WARM_EXPLAIN="1", WARM_STRICT=strict)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.count(line) == 1, proc.stderr
        assert proc.stdout.strip() == "{'shape': 1}"


# A worker writing back (argv[1]) reloads its bundle at runtime (`use_bundle` again, from a
# request), and a SIGTERM whose handler calls `sys.exit` lands at that reload's write-back:
# raised by a trace hook at the first call of `persist` in warm's runtime module, as the
# handler would raise it there (Python runs handlers between bytecodes), without timing.
RELOAD_INTERRUPTED = (
    """
import sys
import numpy as np
import warmcli
from warmcli import Kernel, Tunable
"""
    + scaled(3)
    + """
warmcli.use_bundle(sys.argv[1], write=True)
rt = warmcli.runtime("host")
for i in range(3):
    one(rt, i)
def tracer(frame, event, arg):
    code = frame.f_code
    if event == "call" and code.co_name == "persist" and code.co_filename.endswith("runtime.py"):
        sys.settrace(None)
        raise SystemExit(0)
sys.settrace(tracer)
warmcli.use_bundle(sys.argv[1], write=True)
"""
)


def test_a_sigterm_during_a_reloads_write_back_reports_each_miss_once(
    python: ForkedPython, warm: Warm, tmp_path: Path
) -> None:
    # The report at exit named every kernel and tune twice ("lacked 12 kernel(s) and 6
    # tune(s)" of 6 and 3): the interrupted reload had counted them as its closed runtimes'
    # and left the runtimes in use, whose misses the exit's report counted again.
    bundle = tmp_path / "app.warm"
    proc = _script(python, warm, RELOAD_INTERRUPTED, bundle, WARM_REPORT="1")
    assert proc.returncode == 0, proc.stderr
    assert "lacked 6 kernel(s) and 3 tune(s)" in proc.stderr, proc.stderr
    assert "(written back into it)" in proc.stderr
    listed = [line for line in proc.stderr.splitlines() if line.startswith("  ")]
    assert len(listed) == len(set(listed)) == 9, proc.stderr
    stats = warm.json("stats", bundle)
    assert (len(stats["kernels"]), len(stats["tunes"])) == (6, 3)  # 3 kernels + 3 candidates


# A request thread gets the runtime, another thread's hot reload (`use_bundle` again)
# closes it mid-request, the request goes on on it (a kernel and a tune of its own, cold)
# and ends, dropping the runtime, as a request handler does.
LATE_REQUEST = (
    """
import gc, sys
import numpy as np
import warmcli
from warmcli import Kernel, Tunable
"""
    + scaled(6)
    + """
warmcli.use_bundle(sys.argv[1])
def request(i):
    rt = warmcli.runtime("host")
    warmcli.use_bundle(sys.argv[1])  # the hot reload, landing mid-request
    return one(rt, i)
request(5)  # the bundle lacks it: the report must count it
gc.collect()
"""
)


def test_a_request_a_hot_reload_cut_still_counts_once_its_runtime_is_gone(
    python: ForkedPython, warm: Warm, tmp_path: Path
) -> None:
    # What a runtime did cold after a hot reload closed it was counted by the report at
    # exit only while that runtime was still referenced: a request handler that dropped it
    # left "served everything: compiled 0 kernels, tuned 0 operations" of a process that
    # compiled and tuned cold.
    short = tmp_path / "short.warm"
    code = SERVICE.replace("range(1, 6)", "range(1, 5)")  # requests 0..4 only
    proc = _script(python, warm, code, short, "make")
    assert proc.returncode == 0, proc.stderr
    proc = _script(python, warm, LATE_REQUEST, short, WARM_REPORT="1")
    assert proc.returncode == 0, proc.stderr
    assert "served everything" not in proc.stderr, proc.stderr
    # its kernel, and the tune's 3 candidates: a closed runtime serves nothing from the bundle
    cold = "use_bundle() closed compiled 4 kernel(s) and tuned 1 operation(s) cold"
    assert cold in proc.stderr, proc.stderr
