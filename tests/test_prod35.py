"""Production under an SRE's hands (stop 35): pre-fork servers, bundles replaced or removed
under serving processes, write-back interrupted at exit, many kernels in one process.

Each test is a real production process (`python -c`, the real bundle, the real cc) whose
report, exit and bundle are checked afterwards. An interruption at a given point of the
exit's write-back is raised there by a trace hook, as a SIGTERM handler calling
`sys.exit` does when the signal lands at that point (Python runs handlers between
bytecodes), so the test needs no timing.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, Warm

# A production process: `argv[1]` the bundle, written back at exit; `argv[2]` how many
# kernels it launches (each its own, mostly not in the example bundle); prints a digest.
SERVE = """
import hashlib, sys
import numpy as np
import warmcli
from warmcli import Kernel
warmcli.use_bundle(sys.argv[1], write=True)
rt = warmcli.runtime()
src = "void f(float *x, int n) { for (int j = 0; j < n; j++) x[j] = x[j] * 0.5f + (float)ID; }"
h = hashlib.sha256()
for i in range(int(sys.argv[2])):
    x = rt.upload(np.arange(8, dtype=np.float32))
    rt.launch(Kernel(src, "f", "Pi", defines={"ID": i}, name=f"f{i}"), x, 8)
    h.update(rt.read(x).tobytes())
print(h.hexdigest())
"""

# Appended to SERVE: at exit, before warm's write-back (atexit runs last-registered first),
# trace calls so that the first call of `name` in warm's module `module` raises SystemExit.
INTERRUPT_AT = """
import atexit
def _tracer(frame, event, arg):
    code = frame.f_code
    if event == "call" and code.co_name == {name!r} and code.co_filename.endswith({module!r}):
        sys.settrace(None)
        raise SystemExit(0)
atexit.register(lambda: sys.settrace(_tracer))
"""


def _run(warm: Warm, code: str, *args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True,
        text=True,
        env=dict(warm.env, **env),
        timeout=300,
        cwd=ROOT,
    )


def _computed(kernels: int) -> str:
    """What `SERVE` prints for `kernels` kernels, computed here (as a process serving no
    bundle prints it, without its compiles)."""
    digest = hashlib.sha256()
    for i in range(kernels):
        x = np.arange(8, dtype=np.float32)
        digest.update((x * np.float32(0.5) + np.float32(i)).tobytes())
    return digest.hexdigest() + "\n"


def _kernels(bundle: Path) -> int:
    with sqlite3.connect(f"file:{bundle}?mode=ro", uri=True) as conn:
        return int(conn.execute("SELECT count(*) FROM kernels").fetchone()[0])


def test_an_interrupt_after_the_misses_are_stored_does_not_say_not_written_back(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    # A SIGTERM handler's sys.exit landing after the write-back's transaction committed
    # (while it moved the served kernels' last-used times) said "NOT written back:
    # interrupted" of kernels the bundle then held.
    warm, good = made
    bundle = shutil.copyfile(good, tmp_path / "app.warm")
    before = _kernels(bundle)
    code = SERVE + INTERRUPT_AT.format(name="touch", module="store.py")
    proc = _run(warm, code, bundle, "4", WARM_REPORT="1")
    # stopped in its write-back by a SystemExit(0): 0, the status it asked for
    assert proc.returncode == 0, proc.stderr
    assert _kernels(bundle) == before + 4
    assert "NOT written back" not in proc.stderr, proc.stderr
    assert "written back into it" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    quiet = shutil.copyfile(good, tmp_path / "quiet.warm")
    proc = _run(warm, code, quiet, "4")
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert _kernels(quiet) == before + 4


def test_an_interrupt_before_the_misses_are_stored_still_says_so(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    bundle = shutil.copyfile(good, tmp_path / "app.warm")
    before = _kernels(bundle)
    code = SERVE + INTERRUPT_AT.format(name="put", module="store.py")
    proc = _run(warm, code, bundle, "4", WARM_REPORT="1")
    assert proc.returncode == 0, proc.stderr  # the status its SystemExit(0) asked for
    assert _kernels(bundle) == before
    assert "NOT written back: interrupted" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


# The example workload's kernels and tunes, all of them in the example bundle: a process
# the bundle serves entirely (it prints a digest of what it computed).
EXAMPLE = """
import hashlib, sys
import numpy as np
import warmcli
sys.path.insert(0, "examples")
from matmul_host import BIAS_RELU, MATMUL, ROW_SUM, SHAPES
rt = warmcli.runtime()
rng = np.random.default_rng(0)
h = hashlib.sha256()
for m, n, k in SHAPES:
    a = rt.upload(rng.standard_normal((m, k), dtype=np.float32))
    b = rt.upload(rng.standard_normal((k, n), dtype=np.float32))
    bias = rt.upload(rng.standard_normal(n, dtype=np.float32))
    c = rt.buffer((m, n), "float32")
    out = rt.buffer(m, "float32")
    rt.tune(MATMUL, a, b, c, m, n, k)
    rt.launch(BIAS_RELU, c, bias, m, n)
    rt.launch(ROW_SUM, c, out, m, n)
    h.update(rt.read(out).tobytes())
print(h.hexdigest())
"""


@pytest.fixture(scope="module")
def cold_example(made: tuple[Warm, Path]) -> str:
    """What `EXAMPLE` prints served no bundle (`WARM_BUNDLE=""`: every kernel compiled and
    every tune measured cold), once for the module's tests that compare with it."""
    cold = _run(made[0], EXAMPLE, WARM_BUNDLE="")
    assert cold.returncode == 0, cold.stderr
    return cold.stdout


def test_a_served_process_that_cannot_move_last_used_times_says_nothing(
    made: tuple[Warm, Path], tmp_path: Path, cold_example: str
) -> None:
    # WARM_BUNDLE_WRITE=1 on a bundle whose lock cannot be taken (a read-only mount, here a
    # lock path that is a folder): a process the bundle served entirely printed "warm: could
    # not write back into the bundle: ..." at every exit, with nothing to write back, where
    # WARM_REPORT=1 says it served everything.
    warm, good = made
    bundle = shutil.copyfile(good, tmp_path / "app.warm")
    Path(f"{bundle}.lock").mkdir()
    proc = _run(warm, EXAMPLE, WARM_BUNDLE=str(bundle), WARM_BUNDLE_WRITE="1")
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, cold_example, "")
    proc = _run(warm, EXAMPLE, WARM_BUNDLE=str(bundle), WARM_BUNDLE_WRITE="1", WARM_REPORT="1")
    assert proc.stdout == cold_example
    assert (
        proc.stderr
        == f"warm: bundle {bundle} served everything: compiled 0 kernels, tuned 0 operations\n"
    )


def _limited_files(limit: int):  # type: ignore[no-untyped-def]
    import resource

    def limit_files() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    return limit_files


def test_a_process_under_ulimit_n_32_compiles_and_serves_more_kernels_than_it_has_files(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    # Every host library a process loaded kept a descriptor open for its life: under
    # `ulimit -n 64` the 55th kernel failed, "cannot run /usr/bin/cc: [Errno 24] Too many
    # open files", a KernelCompileError, cold or served. (40 kernels under `ulimit -n 32`:
    # more libraries than descriptors, so one kept open each runs out whatever else is open.)
    warm, _ = made
    bundle = tmp_path / "many.warm"
    cold = _computed(40)  # (exact: halves and small whole numbers in float32)

    def limited(*env: tuple[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", SERVE, str(bundle), "40"],
            capture_output=True,
            text=True,
            env=dict(warm.env, **dict(env)),
            timeout=300,
            cwd=ROOT,
            preexec_fn=_limited_files(32),
        )

    first = limited()  # compiles all 40, writes them back
    assert (first.returncode, first.stdout, first.stderr) == (0, cold, "")
    assert _kernels(bundle) == 40
    home = str(tmp_path / "home2")  # another home: every library file written, then loaded
    again = limited(("WARM_REPORT", "1"), ("WARM_HOME", home))
    assert again.returncode == 0, again.stderr
    assert again.stdout == cold
    assert "served everything" in again.stderr, again.stderr


def test_a_library_loaded_after_another_closed_its_descriptor_is_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Libraries are loaded from `/proc/self/fd/N`, the descriptor closed once loaded: the
    # next file opened takes the same N, and the loader, which knows a library by the name
    # it was opened by, must not hand back the first library for it.
    from warmcli.backends.host.libraries import LibraryCache

    monkeypatch.setenv("WARM_HOME", str(tmp_path / "home"))
    answers = []
    for value in (41, 42, 43):
        source = tmp_path / f"k{value}.c"
        source.write_text(f"int answer(void) {{ return {value}; }}\n")
        so = tmp_path / f"k{value}.so"
        subprocess.run(["cc", "-shared", "-fPIC", "-o", so, source], check=True)
        answers.append(LibraryCache().load(so.read_bytes()).answer())
    assert answers == [41, 42, 43]


def test_a_bundle_removed_under_a_served_process_is_not_made_again_empty(
    made: tuple[Warm, Path], tmp_path: Path, cold_example: str
) -> None:
    # An operator retires the bundle (`rm`) while a WARM_BUNDLE_WRITE=1 process the bundle
    # served entirely runs: its exit made an empty bundle at the path, only to move the
    # last-used times of kernels it no longer holds.
    warm, good = made
    bundle = shutil.copyfile(good, tmp_path / "app.warm")
    code = EXAMPLE + "import os\nos.unlink(os.environ['WARM_BUNDLE'])\n"
    proc = _run(warm, code, WARM_BUNDLE=str(bundle), WARM_BUNDLE_WRITE="1", WARM_REPORT="1")
    assert (proc.returncode, proc.stdout) == (0, cold_example), proc.stderr
    assert "served everything" in proc.stderr, proc.stderr
    assert not bundle.exists()


# A C compiler whose builds (not its `--version`) say they started (`started` beside it),
# then wait for `go` to exist.
SLOW_CC = """#!/bin/sh
case " $* " in *" -o "*)
  touch "$(dirname "$0")/started"
  while [ ! -e "$(dirname "$0")/go" ]; do sleep 0.02; done;;
esac
exec cc "$@"
"""

# A pre-fork server: a thread compiles a kernel (cold) while the main thread forks a worker
# that ends at once (sys.exit, as a worker does); then the compile goes on, in the parent.
FORK_DURING_COMPILE = """
import os, sys, threading, time
import numpy as np
import warmcli
from warmcli import Kernel
folder = sys.argv[1]
warmcli.use_bundle(None)
rt = warmcli.runtime()
k = Kernel("void f(float *x, int n) { for (int j = 0; j < n; j++) x[j] = x[j] * 2 + 1; }",
           "f", "Pi")
out = []
def compile_and_launch():
    x = rt.upload(np.arange(4, dtype=np.float32))
    rt.launch(k, x, 4)
    out.append(rt.read(x).tolist())
thread = threading.Thread(target=compile_and_launch)
thread.start()
while not os.path.exists(os.path.join(folder, "started")):
    time.sleep(0.02)
pid = os.fork()
if pid == 0:
    sys.exit(0)
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
open(os.path.join(folder, "go"), "w").close()
thread.join()
print(code, out)
"""


def test_a_worker_forked_while_a_thread_compiles_leaves_the_parents_compile_alone(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    # The compile's scratch folder was a tempfile.TemporaryDirectory, whose exit finalizer
    # the forked worker inherited and ran at its exit: the parent's cc then wrote into a
    # removed folder, "ToolchainError: cc: ... exited 0 but wrote no shared library: WARM_CC
    # must name a C compiler", a traceback in the parent's thread.
    warm, _ = made
    cc = tmp_path / "slow-cc"
    cc.write_text(SLOW_CC)
    cc.chmod(0o755)
    proc = _run(warm, FORK_DURING_COMPILE, tmp_path, WARM_CC=str(cc))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "0 [[1.0, 3.0, 5.0, 7.0]]\n", proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


# A process forks a worker and ends (a daemon's double fork, a server's master restarting):
# the worker, left alone, launches a kernel new to it.
ORPHAN = """
import os, sys, time
import numpy as np
import warmcli
from warmcli import Kernel
src = "void f(float *x, int n) { for (int j = 0; j < n; j++) x[j] = x[j] * 0.5f + (float)ID; }"
warmcli.use_bundle(None)
rt = warmcli.runtime()
def val(i):
    x = rt.upload(np.arange(8, dtype=np.float32))
    rt.launch(Kernel(src, "f", "Pi", defines={"ID": i}), x, 8)
    return rt.read(x).tolist()
val(1)
done = sys.argv[1]
if os.fork() == 0:
    quiet = os.open(os.devnull, os.O_WRONLY)  # the parent's pipes closed: it ends alone
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    while os.path.exists(os.path.join(done, "parent-running")):
        time.sleep(0.02)
    try:
        result = repr(val(2))
    except Exception as exc:
        result = f"{type(exc).__name__}: {exc}"
    with open(os.path.join(done, "child.txt"), "w") as fh:
        fh.write(result)
    os._exit(0)
print(val(2))
"""


def test_a_worker_its_parent_left_still_loads_new_kernels_without_a_usable_home(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    # Where warm's home cannot hold host libraries (here another user could write its
    # folder), they go to a private temporary folder that the process removes at exit: a
    # forked worker wrote into its parent's, gone once the parent ended, and failed:
    # "DeviceError: cannot load host kernel binary: [Errno 2] No such file or directory".
    import time

    warm, _ = made
    home = tmp_path / "home"
    (home / "host-libraries").mkdir(parents=True)
    (home / "host-libraries").chmod(0o777)
    running = tmp_path / "parent-running"
    running.touch()
    proc = subprocess.Popen(
        [sys.executable, "-c", ORPHAN, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(warm.env, WARM_HOME=str(home), TMPDIR=str(tmp_path)),  # (the worker's
        cwd=ROOT,  # folder, left by its `os._exit`, goes with `tmp_path`)
    )
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    running.unlink()  # the parent has ended: the worker goes on
    child = tmp_path / "child.txt"
    for _ in range(3000):
        if child.exists() and child.read_text():
            break
        time.sleep(0.02)
    assert child.read_text() == out.strip(), err
