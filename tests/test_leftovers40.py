"""leftovers40: small wrongs left from the last stop.

- An exit function of the workload that ends its process with `os._exit(N)`, N not 0 (plain
  Python exits N: a failure), left `warm run`'s exit code as the run decided it, silently; one
  that crashed it was said in one warning line. Now `os._exit(N)` is said in one line too
  (the run's code stands, as the README says); `os._exit(0)`, the idiom that skips a
  library's teardown, stays silent.
- A process the workload forked at its import (not in its entry) went on, as a copy of the
  worker, into warm's own run: passes, a bundle write and a second report. It now ends as
  that import ends (0, or 1 with what it raised in one line), as one forked in the entry
  ends as the entry returns.
- A tune whose `key=` changed between warms missed as any new shape would (`shape: bundle
  has 16, this process wants ["rows", 16]`); a key of a form none the bundle holds has now
  says its key= may have changed (`warmcli.runtime.nearest.key_form_hint`).
- A keyed reader's first copy, the keyless reader's kept copy, refused for being over
  WARM_REMOTE_MAX_SIZE was refused silently: with the store failing, the start's one line
  named only the store. It now says too that the kept copy was not taken, and why.
- SIGTERM to `warm run` whose workload's own SIGTERM handler calls `sys.exit` (as the README
  advises production to) was told as the workload calling sys.exit, exit 2; it is the stop
  it was sent now: `warm: interrupted`, exit 130 (what happens without such a handler:
  exit functions run, TMPDIR clean, the bundle whole).

Real CLI (and production processes) in a process of its own (a `warm` command a fork of a
server that imported the CLI once, one whatever TMPDIR and the workloads' own
MARK, CHILD_RAISES and SLEEP a test sets, `tests/forked_tool_env.py`; the SIGTERM one started),
real cc, real SQLite files, a real HTTP store (`test_fleet36.s3_like`).
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from conftest import Warm
from forked_tool_env import forked_tool_warm
from test_fleet36 import S3Like, s3_like  # noqa: F401  (the fixture)
from test_leftovers39 import _serve, signed_small  # noqa: F401  (the fixture)

# the forking servers, whatever TMPDIR (a tool variable) and the workloads' own
# variables a test sets (each a path of its own: each test's were a server's start)
tool_servers, warm = forked_tool_warm("MARK", "CHILD_RAISES", "SLEEP")


HOST_WORKLOAD = r"""
import atexit, os
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void fill(float *o, int n) { for (int i = 0; i < n; i++) o[i] = 2.0f; }", "fill", "Pi")
def workload(rt):
    o = rt.buffer(4, "float32")
    rt.launch(K, o, 4)
    return o
"""


def test_an_exit_functions_nonzero_os_exit_is_one_warning_line(warm: Warm, tmp_path: Path) -> None:
    workload = tmp_path / "w.py"
    workload.write_text(HOST_WORKLOAD + "atexit.register(os._exit, 3)\n")
    for command in (
        ("run", workload, "-b", tmp_path / "b.warm", "-q"),
        ("verify", tmp_path / "b.warm", "-w", workload, "-q"),
    ):
        done = warm(*command)
        assert done.returncode == 0, done.stderr  # the run's code stands (README)
        assert done.stderr == (
            "warm: warning: the workload's exit functions ended its process with os._exit(3)"
            " after the run finished (ignored: the run's exit code stands)\n"
        ), done.stderr
        assert "the bundle is complete" in done.stdout


FORKS_AT_IMPORT = r"""
import os, sys
MARK = os.environ["MARK"]
pid = os.fork()
if pid == 0:
    open(MARK, "a").write("child imported\n")
    if os.environ.get("CHILD_RAISES"):
        raise ValueError("the child's import failed")
else:
    status = os.waitpid(pid, 0)[1]
    open(MARK, "a").write(f"child exited {os.waitstatus_to_exitcode(status)}\n")
"""


def test_a_child_forked_at_import_ends_there(warm: Warm, tmp_path: Path) -> None:
    """A process the workload forked at its import (not in its entry) went on, as the
    worker's copy, into warm's own run: it ran the passes, wrote the bundle and printed a
    second report. It now ends where its import ends, as one forked in the entry does:
    exit 0, or 1 with what its import raised in one line on its stderr."""
    (tmp_path / "w.py").write_text(FORKS_AT_IMPORT + HOST_WORKLOAD)
    mark = tmp_path / "mark"
    warm.env = dict(warm.env, MARK=str(mark))
    for command, cwd in (
        (("run", tmp_path / "w.py", "-b", tmp_path / "b.warm", "-q"), tmp_path),
        (("run", "-m", "w", "-b", tmp_path / "m.warm", "-q"), tmp_path),
    ):
        mark.write_text("")
        done = warm(*command, cwd=cwd)
        assert done.returncode == 0, done.stderr
        assert done.stdout.count("stored 1 new kernel(s)") == 1, done.stdout
        assert done.stdout.count("verify:") == 1, done.stdout
        assert mark.read_text() == "child imported\nchild exited 0\n"
    warm.env = dict(warm.env, CHILD_RAISES="1")
    mark.write_text("")
    done = warm("run", tmp_path / "w.py", "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 0, done.stderr  # the parent's import went on: the run is sound
    assert mark.read_text() == "child imported\nchild exited 1\n"
    assert done.stderr.count("\n") == 1 and "ValueError: the child's import failed" in done.stderr


# (its KEY and N read from `t.json` beside it, not the environment: each verify a fork of
# one server, not of a server an environment, `tests/forked_cli.py`)
TUNED = r"""
import json, os
from warmcli import Kernel, Tunable
DEVICE = "host"
SET = json.loads(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "t.json")).read())
SRC = "void scale(float *x, int n) { for (int i = 0; i < n; i++) x[i] *= F; }"
KEYS = {"n": lambda x, n: n, "pair": lambda x, n: ["rows", n], "default": None}
SCALE = Tunable(
    "scale",
    {n: Kernel(SRC, "scale", "Pi", defines={"F": f}) for n, f in (("a", "2.0f"), ("b", "3.0f"))},
    lambda rt, k, x, n, stream=None: rt.launch(k, x, n, stream=stream),
    key=KEYS[SET.get("KEY", "n")],
)
def workload(rt):
    n = int(SET.get("N", "16"))
    x = rt.buffer(n)
    rt.tune(SCALE, x, n)
"""

KEY_CHANGED = "did the tunable's key= change since it was warmed?"


def test_a_miss_of_a_changed_key_says_so(warm: Warm, tmp_path: Path) -> None:
    """A tune whose `key=` changed between warms missed as a plain new shape (`shape: bundle
    has 16, this process wants ["rows", 16]`); a key of a form none of the bundle's has (a
    list where they are numbers, the default key where they are key='s) now says the key=
    may have changed. A new value of the same form (16 warmed, 32 wanted) says nothing."""
    workload, bundle = tmp_path / "t.py", tmp_path / "t.warm"
    workload.write_text(TUNED)
    (tmp_path / "t.json").write_text("{}")
    assert warm("run", workload, "-b", bundle, "-q").returncode == 0
    for env, hinted in (({"KEY": "pair"}, True), ({"KEY": "default"}, True), ({"N": "32"}, False)):
        (tmp_path / "t.json").write_text(json.dumps(env))
        done = warm("verify", bundle, "-w", workload, "--explain-misses")
        misses = [line for line in done.stdout.splitlines() if line.startswith("miss: tune")]
        assert len(misses) == 1, done.stdout + done.stderr
        assert ": shape: bundle has 16, " in misses[0], misses[0]
        assert (KEY_CHANGED in misses[0]) is hinted, misses[0]


def test_a_seed_copy_refused_for_its_size_is_said(
    warm: Warm,
    tmp_path: Path,
    signed_small: tuple[Path, Path, Path],  # noqa: F811
    s3_like: tuple[S3Like, str],  # noqa: F811
) -> None:
    """A keyed reader's first copy of a URL is the keyless reader's copy where its keys trust
    it (`warmcli.bundle.remote_seed`), unless it is over WARM_REMOTE_MAX_SIZE: then it was
    not taken, silently, and with the store down the start failed naming only the store.
    The one line now says the kept copy was not taken, and why."""
    held, base = s3_like
    key, bundle, _ = signed_small
    url = f"{base}/l40.warm"
    held.files["/l40.warm"] = bundle.read_bytes()
    machine = dict(warm.env, WARM_HOME=str(tmp_path / "machine"))
    assert _serve(machine, url).returncode == 0  # the keyless reader's copy, kept
    del held.files["/l40.warm"]  # the store loses it
    limit = str(bundle.stat().st_size - 1)
    keyed = dict(machine, WARM_TRUSTED_KEYS=f"{key}.pub", WARM_REMOTE_MAX_SIZE=limit)
    started = _serve(keyed, url)
    assert started.returncode != 0
    last = started.stderr.strip().splitlines()[-1]
    assert f"more than the {limit} allowed (WARM_REMOTE_MAX_SIZE)" in last, last


STOPPED = r"""
import atexit, os, signal, sys, tempfile, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # as gunicorn's, as the README advises
SCRATCH = tempfile.TemporaryDirectory(prefix="app-scratch-")
atexit.register(lambda: open(os.environ["MARK"], "a").write("exit function ran\n"))
""" + HOST_WORKLOAD.replace(
    "    return o\n",
    '    if os.environ.get("SLEEP"):\n'
    '        open(os.environ["MARK"], "a").write("ready\\n")\n'
    "        time.sleep(30)\n"
    "    return o\n",
)


def test_sigterm_to_a_run_whose_workload_exits_on_it_is_an_interrupt(
    warm: Warm, tmp_path: Path
) -> None:
    """SIGTERM to `warm run` is forwarded to its worker; a workload whose own SIGTERM handler
    calls `sys.exit` (as the README advises for production) was told `workload called
    sys.exit(0) during CompileOnly: a workload returns...`, exit 2, blaming the workload for
    the stop the user asked for. It is an interrupt now, as without that handler: `warm:
    interrupted: ... kept`, exit 130, the exit functions run, TMPDIR clean, the bundle whole."""
    workload, bundle, mark, tmp = tmp_path / "w.py", tmp_path / "b.warm", tmp_path / "m", tmp_path
    workload.write_text(STOPPED)
    (tmp / "t").mkdir()
    warm.env = dict(warm.env, MARK=str(mark), TMPDIR=str(tmp / "t"))
    assert warm("run", workload, "-b", bundle, "-q").returncode == 0
    mark.write_text("")
    warm.env = dict(warm.env, SLEEP="1")
    proc = warm.popen("run", workload, "-b", bundle, "-q")
    deadline = time.monotonic() + 30
    while "ready" not in mark.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130, stdout + stderr
    assert stderr.startswith("warm: interrupted") and stderr.count("\n") == 1, stderr
    assert mark.read_text() == "ready\nexit function ran\n"
    assert list((tmp / "t").iterdir()) == []
    warm.env.pop("SLEEP")
    assert warm("verify", bundle, "-w", workload, "-q").returncode == 0
