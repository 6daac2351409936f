"""atexit39: `warm run` leaves what a plain run cleans up; a false report line.

- A workload's exit functions never ran under `warm run` (nor `warm verify --workload`):
  its worker ends by `os._exit`, so a `tempfile.TemporaryDirectory()` (a `weakref.finalize`)
  or a `mkdtemp` removed by `atexit.register(shutil.rmtree, ...)`, made at the import of the
  workload or of its app's modules, left an `app-scratch-*` folder in TMPDIR after every run,
  which `python workload.py` removes. Now the worker runs them once, as Python would, before
  it reports its code, Ctrl-C or not; only the workload's (not the supervisor's it inherits).
- `WARM_REPORT=1 warm run` (and `warm verify`) printed the production side's at-exit report,
  `warm: no bundle is loaded: this process compiled 0 kernel(s) ...`, false there.

Real CLI in a process of its own (each command a fork of a server that imported the CLI once,
one whatever TMPDIR, MARK and STOP a test sets, `tests/forked_tool_env.py`),
real cc, real files; the fork test forks for real.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from conftest import Warm
from forked_tool_env import forked_tool_warm
from test_passover39 import SEGV_CANDIDATE  # a Tunable whose first candidate segfaults

SCRATCH = r"""
import atexit, os, shutil, tempfile
SCRATCH = tempfile.TemporaryDirectory(prefix="app-scratch-")
made = tempfile.mkdtemp(prefix="app-scratch-")
atexit.register(shutil.rmtree, made)
atexit.register(lambda: open(os.environ["MARK"], "a").write(f"{os.getpid()}\n"))
"""

WORKLOAD = r"""
import os, signal
import app.scratch  # the app's module: its folders made at import
import atexit, shutil, tempfile
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void fill(float *o, int n) { for (int i = 0; i < n; i++) o[i] = 2.0f; }", "fill", "Pi")
OWN = tempfile.TemporaryDirectory(prefix="app-scratch-")
mine = tempfile.mkdtemp(prefix="app-scratch-")
atexit.register(shutil.rmtree, mine)
atexit.register(print, "exit function ran")
def workload(rt):
    o = rt.buffer(4, "float32")
    rt.launch(K, o, 4)
    if os.environ.get("STOP"):
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C: a plain run runs its exit functions
    return o
"""


# the forking servers, whatever TMPDIR (a tool variable) and the workloads' own
# variables a test sets (each a path of its own: each test's were a server's start)
tool_servers, warm = forked_tool_warm("MARK", "STOP")


def _workload(warm: Warm, tmp_path: Path, text: str = WORKLOAD) -> tuple[Path, Path, Path]:
    """`w.py` and its `app` package in `tmp_path`, warm's TMPDIR private: the workload,
    the TMPDIR and the file each exit function run appends its process id to."""
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "scratch.py").write_text(SCRATCH)
    workload = tmp_path / "w.py"
    workload.write_text(text)
    tmp, mark = tmp_path / "tmp", tmp_path / "mark"
    tmp.mkdir()
    warm.env = dict(warm.env, TMPDIR=str(tmp), MARK=str(mark))
    return workload, tmp, mark


def _scratch(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("app-scratch-"))


def test_warm_run_and_verify_leave_no_scratch_folder(warm: Warm, tmp_path: Path) -> None:
    workload, tmp, mark = _workload(warm, tmp_path)
    done = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 0, done.stderr
    assert _scratch(tmp) == []
    assert done.stdout.endswith("exit function ran\n"), done.stdout  # where its output goes
    assert len(mark.read_text().split()) == 1  # once: one worker imported the workload
    done = warm("verify", tmp_path / "b.warm", "-w", workload, "-q")
    assert done.returncode == 0, done.stderr
    assert _scratch(tmp) == []
    pids = mark.read_text().split()
    assert len(pids) == 2 and len(set(pids)) == 2, pids  # once more: the replay's own worker


def test_under_json_the_exit_functions_output_goes_to_stderr(warm: Warm, tmp_path: Path) -> None:
    workload, tmp, _ = _workload(warm, tmp_path)
    for command in (
        ("run", workload, "-b", tmp_path / "b.warm", "--json"),
        ("verify", tmp_path / "b.warm", "-w", workload, "--json"),
    ):
        done = warm(*command)
        assert done.returncode == 0, done.stderr
        json.loads(done.stdout)  # one JSON object, nothing after it
        assert "exit function ran" in done.stderr
        assert _scratch(tmp) == []


def test_an_interrupted_run_runs_them_as_ctrl_c_does(warm: Warm, tmp_path: Path) -> None:
    workload, tmp, mark = _workload(warm, tmp_path)
    warm.env = dict(warm.env, STOP="1")
    done = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 130, done.stderr
    assert _scratch(tmp) == []
    assert len(mark.read_text().split()) == 1


def test_an_exit_function_that_raises_is_one_line_and_the_run_stands(
    warm: Warm, tmp_path: Path
) -> None:
    text = WORKLOAD + "def boom():\n    raise ValueError('no cleanup\\nsecond line')\n"
    text += "atexit.register(boom)\n"
    workload, tmp, _ = _workload(warm, tmp_path, text)
    done = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    (line,) = [x for x in done.stderr.splitlines() if "boom" in x]
    assert line.startswith("warm: warning: the workload's exit function boom raised: ")
    assert f"{workload}:" in line and "ValueError: no cleanup (ignored" in line, line
    assert _scratch(tmp) == []  # the others ran


def test_warm_report_prints_no_production_report_in_warms_commands(
    warm: Warm, tmp_path: Path
) -> None:
    workload, _, _ = _workload(warm, tmp_path)
    warm.env = dict(warm.env, WARM_REPORT="1")
    for command in (
        ("run", workload, "-b", tmp_path / "b.warm", "-q"),
        ("verify", tmp_path / "b.warm", "-q"),
        ("verify", tmp_path / "b.warm", "-w", workload, "-q"),
    ):
        done = warm(*command)
        assert done.returncode == 0, done.stderr
        assert "this process compiled" not in done.stderr, done.stderr
        assert "no bundle is loaded" not in done.stderr, done.stderr


def test_a_production_process_still_prints_it(warm: Warm) -> None:
    code = "import warmcli; warmcli.runtime('host')"
    env = dict(warm.env, WARM_REPORT="1", WARM_BUNDLE="")
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "warm: no bundle is loaded: this process compiled 0 kernel(s)" in done.stderr


def test_a_worker_runs_only_its_own_exit_functions(tmp_path: Path) -> None:
    """What the process it was forked from registered (an exit function, a temporary
    folder's finalizer) is not the worker's: only what the worker made runs at its end."""
    from warmcli.warming.leftovers import forget_inherited, run_exit_functions

    parents = tempfile.TemporaryDirectory(dir=tmp_path)
    mark = tmp_path / "parent-ran"
    atexit.register(mark.write_text, "ran")
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child's exit status is what is tested
            code = 1
            try:
                forget_inherited()
                own = tempfile.TemporaryDirectory(dir=tmp_path)
                atexit.register(Path(tmp_path / "child-ran").write_text, own.name)
                run_exit_functions()
                code = 0 if not os.path.exists(own.name) else 3
            finally:
                os._exit(code)
        assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        assert os.path.isdir(parents.name)
        assert not mark.exists()
        assert (tmp_path / "child-ran").exists()
    finally:
        atexit.unregister(mark.write_text)
        parents.cleanup()


def test_an_exit_function_that_ends_the_process_leaves_the_runs_code(
    warm: Warm, tmp_path: Path
) -> None:
    """One that calls `os._exit` (to skip a library's teardown) ended the worker before it
    let go: `warm run` said the workload ended the process itself, exit 2, after its report."""
    workload, _, _ = _workload(warm, tmp_path, WORKLOAD + "atexit.register(os._exit, 0)\n")
    for command in (
        ("run", workload, "-b", tmp_path / "b.warm", "-q"),
        ("verify", tmp_path / "b.warm", "-w", workload, "-q"),
    ):
        done = warm(*command)
        assert (done.returncode, done.stderr) == (0, ""), done.stderr
        assert "the bundle is complete" in done.stdout
    warm.env = dict(warm.env, STOP="1")  # an interrupted run: 130 still, not the 0 it exits
    done = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 130, done.stderr


def test_an_exit_function_that_crashes_leaves_the_runs_code(warm: Warm, tmp_path: Path) -> None:
    """A library's teardown that crashes as the process ends (SIGSEGV): the run was done
    (polish39b: the crash is said in one warning line, naming the signal)."""
    crash = "atexit.register(lambda: os.kill(os.getpid(), signal.SIGSEGV))\n"
    workload, _, _ = _workload(warm, tmp_path, WORKLOAD + crash)
    done = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 0 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "exit functions killed its process with SIGSEGV" in done.stderr
    assert "the bundle is complete" in done.stdout


CRASHING = (
    r"""
import atexit, os
from warmcli import Kernel, Tunable
atexit.register(lambda: open(os.environ["MARK"], "a").write(f"{os.getpid()}\n"))
"""
    + SEGV_CANDIDATE
    + r"""def workload(rt):
    x = rt.buffer(16)
    rt.tune(SCALE, x, 16)
"""
)


def test_a_restarted_worker_runs_its_own_once(warm: Warm, tmp_path: Path) -> None:
    """A candidate crashed the first worker (which, crashed, ran none, as under Python); the
    worker that ran the passes again runs its exit functions once."""
    workload, _, mark = _workload(warm, tmp_path, CRASHING)
    done = warm("run", workload, "-b", tmp_path / "b.warm", "-q")
    assert done.returncode == 0, done.stderr
    assert "candidate segv crashed (SIGSEGV)" in done.stderr
    assert len(mark.read_text().split()) == 1
