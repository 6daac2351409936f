"""review38b: today's process-level speed changes, tried as an attacker would.

- compilers started by util-linux's setpriv (ee6787b, since reverted: a warm killed just
  after starting one left it running, 5 runs in 10): a compiler that cannot start (a `#!`
  script whose interpreter is missing, a binary whose loader is, a file with an ELF header
  but no binary) is the one line it was, `cc: cannot run PATH: [Errno N] ...`, and a
  compiler's own exit 127 is its own.
- the worker letting go (e3bc52a): a signal then (its supervisor's death, forwarded)
  never runs it on as the supervisor; a caller that adopts orphans is left no zombie; a
  workload's file never gets the worker's output.
- hotfloor38 (1b56c8a): a hot process's forked child imports no production_report.

Real CLI (each command a fork of a process that imported it once, `tests/forked_cli.py`),
real cc, real files and processes. The production processes are started
(`Warm(warm.env).production`), never forked: one adopts orphans as a subreaper (what is
left of its children is the point) and one checks what its forked child imports (a
fork of a server would find the server's imports).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from warmcli.backends import processes

WORKLOAD = r"""
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void fill(float *o, int n) { for (int i = 0; i < n; i++) o[i] = 2.0f; }", "fill", "Pi")
def workload(rt):
    o = rt.buffer(4, "float32")
    rt.launch(K, o, 4)
    return o
"""


UNSTARTABLE = [("script", 2), ("loader", 2), ("header", 8), ("elf", 8)]  # kind, errno


def _unstartable(tmp_path: Path, kind: str) -> Path:
    """An executable file `execve` refuses: a `#!` script whose interpreter is missing
    (ENOENT), this machine's binary whose loader is missing (ENOENT: a binary of another
    libc), or a file that starts as ELF but is none (ENOEXEC, which setpriv's `execvp`
    ran by `/bin/sh`)."""
    path = tmp_path / f"{kind}-cc"
    if kind == "script":
        path.write_text(f'#!{tmp_path}/no-such-interpreter\nexec cc "$@"\n')
    elif kind == "loader":
        binary = Path(os.path.realpath("/bin/true")).read_bytes()
        at = binary.index(b"/ld-", 0, 4096)  # PT_INTERP's path: near the start, by ld
        path.write_bytes(binary[:at] + b"/no" + binary[at + 3 :])
    elif kind == "header":  # this machine's ELF identity, then no program headers: a shell's
        binary = Path(os.path.realpath("/bin/true")).read_bytes()
        path.write_bytes(binary[:20] + b"\0" * 44 + b"\necho run by a shell\n")
    else:
        path.write_bytes(b"\x7fELF" + b"\0" * 60)
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(("kind", "errno"), UNSTARTABLE)
def test_a_compiler_that_cannot_start_raises_as_before(
    tmp_path: Path, kind: str, errno: int
) -> None:
    """`processes.run` raises `OSError` (its errno) for a command `execve` refuses, tied by
    setpriv or not; it never returns setpriv's `failed to execute` exit status."""
    program = _unstartable(tmp_path, kind)
    with pytest.raises(OSError) as raised:
        processes.run([str(program), "--version"], 30)
    assert raised.value.errno == errno


@pytest.mark.parametrize(("kind", "errno"), UNSTARTABLE)
def test_warm_run_says_a_compiler_that_cannot_start_in_the_one_line_it_did(
    warm: Warm, tmp_path: Path, kind: str, errno: int
) -> None:
    program = _unstartable(tmp_path, kind)
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD)
    warm.env = dict(warm.env, WARM_CC=str(program), WARM_HOME=str(tmp_path / "home"))
    done = warm("run", workload, "-b", tmp_path / "b.warm")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"warm: error: cc: cannot run {program}: [Errno {errno}] " in lines[0]
    assert "setpriv" not in done.stderr
    assert not (tmp_path / "b.warm").exists()


def test_a_started_compilers_own_exit_127_is_its_own(tmp_path: Path) -> None:
    """A compiler that started and exits 127 itself (a tool it runs is missing) is returned
    as it ran, once: its output is its own."""
    count = tmp_path / "count"
    script = tmp_path / "cc"
    script.write_text(f"#!/bin/sh\necho x >> {count}\necho 'cc: cc1: not found' >&2\nexit 127\n")
    script.chmod(0o755)
    done = processes.run([str(script)], 30)
    assert (done.returncode, done.err) == (127, "cc: cc1: not found\n")
    assert count.read_text() == "x\n"
    assert os.path.exists(script)


def warmed_with(
    warm: Warm, tmp_path: Path, text: str, name: str, file: str, *flags: str
) -> tuple[Path, Path, Any]:
    """`text` as `w.py` warmed into `b.warm` (`flags` given), the environment variable
    `name` naming `file` in `tmp_path`: the workload, that file and the run (exit 0)."""
    workload, written = tmp_path / "w.py", tmp_path / file
    workload.write_text(text)
    warm.env = dict(warm.env, **{name: str(written)})
    done = warm("run", workload, "-b", tmp_path / "b.warm", *flags)
    assert done.returncode == 0, done.stderr
    return workload, written, done


# A worker signalled once it has let go (its output and `done` closed): its supervisor's
# death (SIGTERM, the worker's parent-death signal: the supervisor went on, and a busy
# thread of the workload, or the machine's load, kept the worker from its `os._exit` until
# the supervisor had exited, one run in two), or a SIGTERM or Ctrl-C it forwards. Its
# handler raised KeyboardInterrupt before `os._exit`: the forked worker escaped into the
# supervisor's own code and ran to its end, the workload's `atexit` functions (which a
# worker never runs) among it, and its `warm: interrupted` written to whatever file then
# held descriptor 1 or 2. Here a profile function sends the signal as `os.close` of `done`
# returns in `_let_go`, so it lands there every time. (atexit39: the worker runs the
# workload's exit functions once, before it lets go: one line a pass here; one the
# profile function registers then, `late`, would run only if the worker ran on.)
SIGNALLED_AT_EXIT = r"""
import atexit, os, signal, sys
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void fill(float *o, int n) { for (int i = 0; i < n; i++) o[i] = 2.0f; }", "fill", "Pi")
def signalled_once_let_go(frame, event, arg):
    code = frame.f_code  # isolation's (statistics had a finalizer of that name, stop 60)
    if event == "c_return" and code.co_name == "_let_go" and "isolation" in code.co_filename:
        if frame.f_locals.get("fd") not in (1, 2):  # `done` closed: the supervisor goes on
            atexit.register(lambda: open(os.environ["MARK"], "a").write("late\n"))
            os.kill(os.getpid(), signal.SIGTERM)
def workload(rt):
    atexit.register(lambda: open(os.environ["MARK"], "a").write("atexit\n"))
    sys.setprofile(signalled_once_let_go)
    o = rt.buffer(4, "float32")
    rt.launch(K, o, 4)
    return o
"""


def test_a_worker_that_let_go_never_runs_on_as_the_supervisor(warm: Warm, tmp_path: Path) -> None:
    started = Warm(warm.env)  # (a started warm, not a fork: what a signal's handler runs)
    workload, mark, _ = warmed_with(started, tmp_path, SIGNALLED_AT_EXIT, "MARK", "mark", "-q")
    time.sleep(1)  # the worker has exited (or run on as the supervisor)
    assert mark.read_text() == "atexit\n" * 3  # each pass's, once, before it let go
    assert started("verify", tmp_path / "b.warm", "-w", workload, "-q").returncode == 0
    time.sleep(1)
    assert mark.read_text() == "atexit\n" * 4  # the replay's one pass


# A caller that reaps orphans (a subreaper: a container's init, a service manager, a CI
# runner) runs `warm run` and `warm verify --workload`: warm's supervisor no longer waited
# for its worker once the worker let go, so each worker, orphaned, became the caller's
# child, a zombie of it for as long as it lives (one per run).
SUBREAPER = r"""
import ctypes, json, os, subprocess, sys, time
ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
warm = [sys.executable, "-m", "warmcli"]
workload, bundle = sys.argv[1], sys.argv[2]
codes = [subprocess.run([*warm, *args], capture_output=True).returncode for args in (
    ["run", workload, "-b", bundle, "-q"], ["run", workload, "-b", bundle, "-q"],
    ["verify", bundle, "-w", workload, "-q"])]
time.sleep(0.5)  # a worker torn down after warm exited is gone by now (a zombie stays)
me, left = str(os.getpid()), []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        continue
    if fields[1] == me:
        left.append(fields[0])
print(json.dumps({"codes": codes, "children": left}))
"""


def test_a_caller_that_reaps_orphans_is_left_no_worker(warm: Warm, tmp_path: Path) -> None:
    workload = tmp_path / "w.py"
    workload.write_text(WORKLOAD)
    done = Warm(warm.env).production(SUBREAPER, workload, tmp_path / "b.warm")
    assert done == {"codes": [0, 0, 0], "children": []}


# A workload's threads run on until the worker's `os._exit`. The worker closed its standard
# output and error as it let go, so a file a thread opened then took descriptor 1 and what
# another printed went into it: the workload's data file got warm's stray output. Here a
# profile function, called as the worker's first `os.close` in `_let_go` returns, stands in
# for those threads: it opens the workload's file and prints.
LATE_FILE = r"""
import os, sys
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void fill(float *o, int n) { for (int i = 0; i < n; i++) o[i] = 2.0f; }", "fill", "Pi")
KEPT = []
def late(frame, event, arg):
    if event == "c_return" and frame.f_code.co_name == "_let_go" and not KEPT:
        KEPT.append(open(os.environ["DATA"], "w"))  # a thread's file, open to the end
        KEPT[0].write("data\n")
        KEPT[0].flush()
        print("a late line", flush=True)  # another thread's output
def workload(rt):
    sys.setprofile(late)
    o = rt.buffer(4, "float32")
    rt.launch(K, o, 4)
    return o
"""


def test_a_workloads_file_never_gets_warms_output(warm: Warm, tmp_path: Path) -> None:
    started = Warm(warm.env)  # (a started warm, not a fork: the descriptors it starts with)
    _, data, _ = warmed_with(started, tmp_path, LATE_FILE, "DATA", "data.txt", "-q")
    assert data.read_text() == "data\n"


# hotfloor38: a hot production process never imports `warmcli.production_report`. Its fork
# hook did, in every forked child (a pool's worker, a `preexec_fn`'s child before its exec):
# slower forks, and under `ulimit -n` a child's `Exception ignored in: <function _forked>`
# traceback (`warm verify`'s reader pool: test_faults34).
HOT_FORK = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
import warmcli, matmul_host
matmul_host.workload(warmcli.runtime("host"))
read, write = os.pipe()
if os.fork() == 0:
    os.write(write, json.dumps("warmcli.production_report" in sys.modules).encode())
    os._exit(0)
os.close(write)
child = json.loads(os.read(read, 100))
os.wait()
print(json.dumps({"parent": "warmcli.production_report" in sys.modules, "child": child}))
"""


def test_a_hot_process_forks_without_importing_the_report(warm: Warm, made_here: Path) -> None:
    bundle = made_here  # the host example warmed in warm's home
    examples = Path(__file__).resolve().parent.parent / "examples"
    seen = Warm(warm.env).production(HOT_FORK, examples, bundle=bundle)
    assert seen == {"parent": False, "child": False}
