"""An adversarial user's trial of the workload side and the process lifecycle (round 6).

Through the real CLI in a subprocess (`warm run`, `warm stats`, `warm verify`: a fork of a
process that imported the CLI once, `tests/forked_cli.py`, where no signal, limit or pipe
of the process is tried) and real production processes (each a fork of a process that
imported numpy and warmcli once, `tests/forked_python.py`, where what it computes or
raises is tested), with the host backend (the system C compiler):
- a `check=` callable that answers with numpy's `False` (`(a == b).all()`), an array, a
  generator or a coroutine rejects the candidate (it was accepted: a wrong candidate
  could be picked);
- a Ctrl-C that reaches `warm run` after its passes stored the bundle (while it prints)
  is `interrupted: N kernel(s) ... stored are kept`, exit 130 (it was exit 130 in
  silence);
- `use_bundle` given a wrong type is a `TypeError` naming the argument (one key path
  given as a `str` was read one character a key).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, SQUARES, TUNED_READ, Warm
from forked_cli import forked_made, forked_warm  # noqa: F401  (conftest's, commands forked)
from forked_python import ForkedPython, produced


@pytest.fixture(scope="module")
def producing() -> Iterator[ForkedPython]:
    """The production processes' server (conftest's `warm` environment, `tests/forked_python.py`):
    what each computes or raises is tested, not how it starts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    python = ForkedPython(dict(env, COLUMNS="200"), ROOT)
    yield python
    python.close()


CHECKS = """
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
SOURCE = "void f(float *y, int n) { for (int i = 0; i < n; i++) y[i] = i * MUL; }"
CANDIDATES = {f"m{m}": Kernel(SOURCE, "f", "Pi", defines={"MUL": m}) for m in (1, 2)}


def launch(rt, kernel, y, n, *, stream=None):
    rt.launch(kernel, y, n, stream=stream)


def numpy_bool(outputs, inputs):  # m2 is wrong: numpy's False
    return (outputs[0] == np.arange(16, dtype=np.float32)).all()


def array(outputs, inputs):  # an array of verdicts: no verdict at all
    return outputs[0] == np.arange(16, dtype=np.float32)


def generator(outputs, inputs):  # never run: no verdict at all
    yield outputs[0][1] == 1.0


async def coroutine(outputs, inputs):  # never awaited: no verdict at all
    return True


TUNABLES = [Tunable(name, CANDIDATES, launch, check=check) for name, check in
            (("numpy_bool", numpy_bool), ("array", array), ("generator", generator),
             ("coroutine", coroutine))]


def workload(rt):
    for tunable in TUNABLES:
        if tunable.name == ONLY:
            rt.tune(tunable, rt.buffer(16, "float32"), 16)
"""


def test_a_check_answering_numpy_false_rejects(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    proc = warm("run", workload_file(CHECKS + 'ONLY = "numpy_bool"'), "-b", bundle_path, "-q")
    assert proc.returncode == 0, proc.stderr
    (tune,) = warm.json("stats", bundle_path)["tunes"]
    status = {c["name"]: (c["status"], c["reason"]) for c in tune["candidates"]}
    assert status["m1"][0] == "ok"
    assert status["m2"] == ("failed", "check: the check callable rejected its outputs")
    assert tune["pick"] == "m1"


@pytest.mark.parametrize(
    ("only", "kind"), [("array", "ndarray"), ("generator", "generator"), ("coroutine", "coroutine")]
)
def test_a_check_giving_no_verdict_rejects_with_one_line(
    warm: Warm, workload_file, bundle_path: Path, only: str, kind: str
) -> None:
    proc = warm("run", workload_file(CHECKS + f"ONLY = {only!r}"), "-b", bundle_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "never awaited" not in proc.stderr
    assert "every candidate failed" in proc.stderr.splitlines()[0]
    reason = f"check: the check callable returned {kind}, not True, False or None"
    assert proc.stderr.count(reason) == 2, proc.stderr


ONE = """
import numpy as np
from warmcli import Kernel

DEVICE = "host"
K = Kernel("void f(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "f", "Pi")


def workload(rt):
    rt.launch(K, rt.upload(np.zeros(4, dtype=np.float32)), 4)
"""


def _worker_blocked_writing(pid: int) -> bool:
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        return any("pipe_write" in Path(f"/proc/{c}/wchan").read_text() for c in children)
    except OSError:
        return False


def _full_pipe() -> tuple[int, int]:
    """A pipe (read end, write end) whose buffer is full: a write to it blocks."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(write_end, b"x" * 4096)
    os.set_blocking(write_end, True)
    return read_end, write_end


@pytest.mark.skipif(not Path("/proc/self/wchan").exists(), reason="needs Linux's /proc")
def test_ctrl_c_while_the_run_prints_says_what_was_stored(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    """stdout is a pipe nobody reads yet, filled beforehand: the worker stores the bundle,
    then blocks printing its summary; Ctrl-C then stops it there."""
    read_end, write_end = _full_pipe()
    command = [sys.executable, "-m", "warmcli", "run", workload_file(ONE), "-b", bundle_path, "-q"]
    proc = subprocess.Popen(
        command, stdout=write_end, stderr=subprocess.PIPE, env=warm.env, cwd=ROOT, text=True
    )
    os.close(write_end)
    try:
        deadline = time.monotonic() + 120
        while not _worker_blocked_writing(proc.pid):
            assert proc.poll() is None and time.monotonic() < deadline, "never blocked"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        time.sleep(2)  # forwarded to the worker while it still blocks: then drain the pipe
        with os.fdopen(read_end, "rb") as reader:
            reader.read()
        stderr = proc.stderr.read() if proc.stderr else ""
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
    assert stderr == "warm: interrupted: 1 kernel(s) and 0 tune(s) stored are kept\n"
    assert warm("verify", bundle_path).returncode == 0


USE_BUNDLE = """
import json, sys
import warmcli
try:
    exec("warmcli.use_bundle(" + sys.argv[1] + ")")
except Exception as exc:
    print(json.dumps({"type": type(exc).__name__, "message": str(exc)}))
else:
    print(json.dumps({"type": None, "message": ""}))
"""


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ("BUNDLE, trusted_keys=KEY", "trusted_keys"),  # one key path as a str
        ("BUNDLE, trusted_keys=KEY.encode()", "trusted_keys"),
        ("BUNDLE.encode()", "path"),
        ("3", "path"),
        ("[BUNDLE]", "path"),
        ("BUNDLE, write='no'", "write"),
        ("BUNDLE, write=1", "write"),  # (None reads WARM_BUNDLE_WRITE, as strict=None)
    ],
)
def test_use_bundle_given_a_wrong_type_names_the_argument(
    made: tuple[Warm, Path], producing: ForkedPython, tmp_path: Path, arguments: str, named: str
) -> None:
    warm, good = made
    key = tmp_path / "ci.key"
    assert warm("keygen", key).returncode == 0
    call = arguments.replace("BUNDLE", repr(str(good))).replace("KEY", repr(f"{key}.pub"))
    got = produced(producing, warm, USE_BUNDLE, call)
    assert got["type"] == "TypeError", got
    assert got["message"].startswith(f"use_bundle: {named} "), got
    assert "\n" not in got["message"]


def test_use_bundle_takes_the_types_the_readme_shows(
    made: tuple[Warm, Path], producing: ForkedPython
) -> None:
    warm, good = made
    for call in (
        f"{str(good)!r}",
        f"__import__('pathlib').Path({str(good)!r}), write=False",
        f"{str(good)!r}, write=True, strict='warn', trusted_keys=None",
        f"{str(good)!r}, write=None",
        "None",
    ):
        assert produced(producing, warm, USE_BUNDLE, call) == {"type": None, "message": ""}, call


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.mark.skipif(not Path("/proc/self/wchan").exists(), reason="needs Linux's /proc")
def test_sigterm_to_a_reading_command_is_an_interrupt_and_leaves_no_reader(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm stats --json` of a bundle read by several processes, its stdout a full pipe:
    SIGTERM is answered as Ctrl-C (one line, exit 130; it was killed by the signal, exit
    -15, and left its readers waiting forever)."""
    from big_bundle import build_big

    bundle = tmp_path / "big.warm"
    build_big(bundle, 100, 20000)
    read_end, write_end = _full_pipe()
    command = [sys.executable, "-m", "warmcli", "stats", bundle, "--json"]
    proc = subprocess.Popen(
        command, stdout=write_end, stderr=subprocess.PIPE, env=warm.env, cwd=ROOT, text=True
    )
    os.close(write_end)
    try:
        deadline = time.monotonic() + 120
        while "pipe_write" not in Path(f"/proc/{proc.pid}/wchan").read_text():
            assert proc.poll() is None and time.monotonic() < deadline, "never blocked"
            time.sleep(0.05)
        readers = _children(proc.pid)
        proc.send_signal(signal.SIGTERM)
        with os.fdopen(read_end, "rb") as reader:
            reader.read()
        stderr = proc.stderr.read() if proc.stderr else ""
        assert proc.wait(timeout=60) == 130, stderr
    finally:
        if proc.poll() is None:
            proc.kill()
    assert stderr == "warm: interrupted\n"
    deadline = time.monotonic() + 30
    while any(Path(f"/proc/{r}").exists() for r in readers):
        assert time.monotonic() < deadline, "a reader was left running"
        time.sleep(0.1)


SLOW_SOURCE = "\n".join(
    ["#define S0(i) x[(i) % n] = x[(i) % n] * 1.0001f + (float)(i);"]
    + [
        f"#define S{d}(i) " + " ".join(f"S{d - 1}(i+{k * 4 ** (d - 1)})" for k in range(4))
        for d in range(1, 7)
    ]
    + ["void slow(float *x, int n) { S6(0) }"]
)
FORK_KILL = f"""
import glob, os, signal, threading, time
import numpy as np
from warmcli import Kernel

DEVICE = "host"
SLOW = Kernel({SLOW_SOURCE!r}, "slow", "Pi", options=("-O2",))


def compiling():
    return any(open(f).read().split() for f in glob.glob(f"/proc/{{os.getpid()}}/task/*/children"))


def killer(launched):
    deadline = time.monotonic() + 5
    while not compiling():  # the pass that compiles (the others only queue, or hit)
        if launched.is_set() or time.monotonic() > deadline:  # no compile in this pass
            return
        time.sleep(0.01)
    time.sleep(0.5)  # the compiler's group is known to warm by now
    ready, told = os.pipe()
    pid = os.fork()
    if pid == 0:  # a child of the workload's own, stopped by it as a pool's workers are
        os.write(told, b".")
        time.sleep(30)
        os._exit(0)
    os.read(ready, 1)
    os.kill(pid, signal.SIGTERM)
    os.waitpid(pid, 0)


def workload(rt):
    x = rt.upload(np.zeros(64, dtype=np.float32))
    launched = threading.Event()  # the launch returned: it compiles nothing more
    thread = threading.Thread(target=killer, args=(launched,))
    thread.start()
    rt.launch(SLOW, x, 64)
    launched.set()
    thread.join()
"""


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux's /proc")
def test_a_workloads_child_stopped_by_sigterm_leaves_the_compilers_alone(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    """The child took warm's interrupt handler for its own: SIGTERM made it kill the
    compilers of its parent's run ('kernel slow failed to compile: cc exited with -9',
    exit 2) and print a KeyboardInterrupt traceback. (A started `warm run`, never a fork:
    its signal handlers are what is tried.)"""
    proc = Warm(warm.env)("run", workload_file(FORK_KILL), "-b", bundle_path, "-q")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr


OLD_RUNTIME = """
import json, sys
import numpy as np
import warmcli
from warmcli import Kernel, Tunable

SOURCE = '''void axpy(float *y, const float *x, int n) {
    for (int i = 0; i < n; i++) y[i] += S * x[i];
}'''
AXPY = Tunable("axpy", {f"s{s}": Kernel(SOURCE, "axpy", "PPi", defines={"S": 2}, name=f"s{s}",
                                         options=(f"-DUNUSED={s}",)) for s in (1, 2)},
               lambda rt, k, y, x, n, *, stream=None: rt.launch(k, y, x, n, stream=stream))
if sys.argv[1] != "none":
    warmcli.use_bundle(sys.argv[1])
old = warmcli.runtime("host")
warmcli.use_bundle(None)  # closes `old`'s bundle: what it still does is served cold
y, x = old.upload(np.ones(8, np.float32)), old.upload(np.arange(8, dtype=np.float32))
old.tune(AXPY, y, x, 8)
print(json.dumps({"y": old.read(y).tolist()}))
"""


def test_a_runtime_kept_past_use_bundle_still_tunes(
    made: tuple[Warm, Path], producing: ForkedPython
) -> None:
    """`use_bundle` closed the bundle under a runtime still in use: its next tune raised
    `sqlite3.ProgrammingError: Cannot operate on a closed database.`"""
    warm, good = made
    want = {"y": [1.0 + 2 * i for i in range(8)]}
    assert produced(producing, warm, OLD_RUNTIME, "none") == want
    assert produced(producing, warm, OLD_RUNTIME, good) == want


MISUSE = """
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
K = Kernel("void f(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "f", "Pi")


def workload(rt):
    x = rt.upload(np.zeros(4, np.float32))
    CALL
"""


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ('rt.launch("K", x, 4)', "TypeError: launch: kernel must be a Kernel, not str"),
        (
            "rt.launch(K, x, 4, stream=5)",
            "TypeError: launch: stream must be a stream from rt.stream(), not int",
        ),
        ("rt.tune(K, x, 4)", "TypeError: tune: tunable must be a Tunable, not Kernel"),
        ("rt.tune(None, x, 4)", "TypeError: tune: tunable must be a Tunable, not NoneType"),
    ],
)
def test_a_launch_or_tune_of_the_wrong_type_says_so(
    warm: Warm, workload_file, bundle_path: Path, call: str, message: str
) -> None:
    """They were an AttributeError from inside warm ('str' object has no attribute
    'params', 'int' object has no attribute 'mode', ... no attribute 'candidates')."""
    proc = warm("run", workload_file(MISUSE.replace("CALL", call)), "-b", bundle_path)
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.endswith(f"workload.py:11: {message}"), line


STATEFUL_CHECK = (
    SQUARES
    + """
import os

DEVICE = "host"


class Close:
    def __init__(self, tolerance):
        self.tolerance = tolerance

    def __call__(self, outputs, inputs):
        return bool(np.abs(outputs[0] - inputs[0] ** 2).max() <= self.tolerance)

    def method(self, outputs, inputs):
        return self(outputs, inputs)

    def set_tolerance(self, tolerance):  # a setting, though no __init__ sets it
        self.tolerance = tolerance
        return self


AS_NUMPY = np.float32(os.environ["WARM_TEST_TOLERANCE"])


def by_numpy_global(outputs, inputs):
    return bool(np.abs(outputs[0] - inputs[0] ** 2).max() <= AS_NUMPY)


CHECK = Close(float(os.environ["WARM_TEST_TOLERANCE"]))
SET = Close(0.5).set_tolerance(float(os.environ["WARM_TEST_TOLERANCE"]))
CHECKS = {"object": CHECK, "method": CHECK.method, "numpy": by_numpy_global, "setter": SET}
SQ = Tunable("sq", {"good": GOOD, "fast": FAST_WRONG}, launch, restore=(1,),
             check=CHECKS[os.environ["WARM_TEST_KIND"]])


def workload(rt):
    x = rt.upload(np.arange(64, dtype=np.float32))
    y = rt.buffer(64, "float32")
    rt.tune(SQ, x, y, 64)
    return y
"""
)


@pytest.mark.parametrize("kind", ["object", "method", "numpy", "setter"])
def test_a_check_objects_state_keys_its_tune(
    warm: Warm, producing: ForkedPython, workload_file, bundle_path: Path, kind: str
) -> None:
    """A check that is an object (or its bound method) holding its tolerance, or that reads
    it from a global numpy number: a bundle warmed under a loose one served its pick (the
    fast, wrong candidate) to a process whose check is strict, unchecked."""
    path = workload_file(STATEFUL_CHECK)
    loose = warm.with_env(WARM_TEST_TOLERANCE="1.0", WARM_TEST_KIND=kind)  # (run forked)
    strict = warm.with_env(WARM_TEST_TOLERANCE="0.0", WARM_TEST_KIND=kind)
    assert loose("run", path, "-b", bundle_path, "-q").returncode == 0
    assert produced(producing, loose, TUNED_READ, path, 1, bundle=bundle_path)["tunes"] == 0
    served = produced(producing, strict, TUNED_READ, path, 1, bundle=bundle_path)
    assert served == {"y": 1.0, "tunes": 1}


def test_a_first_run_the_file_size_limit_stops_leaves_no_lock(
    warm: Warm, workload_file, bundle_path: Path
) -> None:
    """`ulimit -f 50`: the new bundle cannot even be made. It said 'nothing was written'
    and left `bundle.warm.lock` behind (a first run that fails before storing anything
    leaves neither the bundle nor its lock)."""
    import resource

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (50 * 1024, 50 * 1024))

    proc = subprocess.run(
        [sys.executable, "-m", "warmcli", "run", workload_file(ONE), "-b", bundle_path, "-q"],
        capture_output=True,
        text=True,
        env=warm.env,
        cwd=ROOT,
        preexec_fn=limited,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    assert "a write to the disk failed" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in bundle_path.parent.iterdir() if "bundle" in p.name) == []


THREAD_COMPILE_FAILS = """
import threading
import numpy as np
from warmcli import Kernel, Tunable

DEVICE = "host"
BAD = Kernel("void f(float *x, int n) { for (int i = 0; i < n; i++) x[i] += NOPE; }", "f", "Pi")
GOOD = Kernel("void g(float *x, int n) { for (int i = 0; i < n; i++) x[i] += 1; }", "g", "Pi")
EXCLUDED = Tunable("t", {"good": GOOD, "bad": BAD},
                   lambda rt, k, x, n, *, stream=None: rt.launch(k, x, n, stream=stream))


def workload(rt):
    x = rt.upload(np.zeros(4, np.float32))
    rt.tune(EXCLUDED, x, 4)  # a candidate that fails is excluded: no miss
    if THREAD:
        thread = threading.Thread(target=lambda: rt.launch(BAD, x, 4, stream=rt.stream()))
        thread.start()
        thread.join()
    rt.launch(GOOD, x, 4)
"""


@pytest.mark.parametrize("thread", [True, False])
def test_a_kernel_failing_to_compile_in_a_thread_is_no_complete_bundle(
    warm: Warm, workload_file, bundle_path: Path, thread: bool
) -> None:
    """The workload's thread raised the compile error (Python prints it and goes on): the
    run said 'the bundle is complete', exit 0, and production compiled it again."""
    path = workload_file(f"THREAD = {thread}\n" + THREAD_COMPILE_FAILS)
    proc = warm("run", path, "-b", bundle_path, "-q")
    if not thread:
        assert proc.returncode == 0, proc.stderr
        return
    assert proc.returncode == 1, proc.stdout
    assert "host: 1 kernel(s) failed to compile, not in the bundle" in proc.stdout
    assert "the bundle is complete" not in proc.stdout
    assert warm("verify", bundle_path, "--workload", path, "-q").returncode == 1


@pytest.mark.parametrize("value", ["false", "off", "no", "False", " 0 "])
def test_warm_bundle_write_false_writes_nothing(
    made: tuple[Warm, Path], producing: ForkedPython, tmp_path: Path, workload_file, value: str
) -> None:
    """`WARM_BUNDLE_WRITE=false` wrote the process's misses back into the bundle (only
    empty and `0` were off, where `WARM_EXPLAIN=false` is off)."""
    import hashlib
    import shutil

    warm, good = made
    bundle = tmp_path / "served.warm"
    shutil.copy(good, bundle)
    before = hashlib.sha256(bundle.read_bytes()).hexdigest()
    quiet = Warm(dict(warm.env, WARM_BUNDLE_WRITE=value, WARM_REPORT=value))
    returns = ONE + "    return rt.upload(np.ones(4, np.float32))\n"
    got = produced(producing, quiet, TUNED_READ, workload_file(returns), 0, bundle=bundle)
    assert got == {"y": 1.0, "tunes": 0}
    assert hashlib.sha256(bundle.read_bytes()).hexdigest() == before


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_workload_setting_a_stream_to_none_leaves_warms_output_alone(
    warm: Warm, workload_file, bundle_path: Path, stream: str
) -> None:
    """`sys.stdout = None` (as under pythonw) in the workload: warm's worker died with its
    own traceback, exit 1."""
    source = ONE.replace(
        "def workload(rt):\n", f"def workload(rt):\n    import sys; sys.{stream} = None\n"
    )
    proc = warm("run", workload_file(source), "-b", bundle_path, "-q")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "the bundle is complete" in proc.stdout


def test_a_workload_emptying_sys_path_leaves_warm_whole(warm: Warm, workload_file) -> None:
    """`sys.path` is put back after each pass, as the working folder is: a workload that
    empties it (or points it elsewhere) left warm unable to import its own output modules."""
    path = workload_file(
        "import sys\nfrom warmcli import Kernel\nDEVICE = 'host'\n"
        "K = Kernel('void f(int *p, int n) { p[0] = n; }', 'f', 'Pi')\n\n"
        "def workload(rt):\n    b = rt.buffer(4, 'int32')\n    rt.launch(K, b, 3)\n"
        "    sys.path.clear()\n    sys.path.append('/nonexistent')\n"
    )
    proc = warm("run", path, "-b", path.with_suffix(".warm"))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "stored 1 new kernel(s)" in proc.stdout


@pytest.mark.parametrize("replaced", ["None", "()", "['/nonexistent']"])
def test_a_workload_replacing_sys_path_leaves_warm_whole(
    warm: Warm, workload_file, replaced: str
) -> None:
    """A workload that replaces `sys.path` (with no list at all, too) has it put back after
    each pass: putting it back into what it left (`None`) was warm's own traceback, exit 1."""
    path = workload_file(
        "import sys\nfrom warmcli import Kernel\nDEVICE = 'host'\n"
        "K = Kernel('void f(int *p, int n) { p[0] = n; }', 'f', 'Pi')\n\n"
        f"def workload(rt):\n    b = rt.buffer(4, 'int32')\n    rt.launch(K, b, 3)\n"
        f"    sys.path = {replaced}\n"
    )
    proc = warm("run", path, "-b", path.with_suffix(".warm"))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stdout + proc.stderr
    assert "stored 1 new kernel(s)" in proc.stdout


def test_read_and_upload_handed_the_wrong_kind_say_so() -> None:
    """`rt.read(3)` was an AttributeError from inside warm; `rt.upload(buffer)` said
    'dtype object is not numeric'."""
    import numpy as np

    from warmcli.backends.host import HostDevice
    from warmcli.runtime.runtime import Runtime

    rt = Runtime(HostDevice())
    buffer = rt.upload(np.arange(4, dtype=np.int32))
    with pytest.raises(TypeError, match=r"^read: buffer must be a Buffer .*, not int$"):
        rt.read(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^upload: array is a Buffer, already on the device"):
        rt.upload(buffer)  # type: ignore[arg-type]
    assert rt.read(buffer).tolist() == [0, 1, 2, 3]


RECORDING_CHECK = (
    SQUARES
    + """


class Close:
    calls = 0  # how many candidates were judged, by every check

    def __init__(self, tolerance):
        self.tolerance = tolerance
        self.worst = 0.0  # the largest error seen: state, not a setting

    def __call__(self, outputs, inputs):
        Close.calls += 1
        n = inputs[2]
        error = float(np.abs(outputs[0][:n] - inputs[0][:n] ** 2).max())
        self._record(error)
        return error <= self.tolerance

    def _record(self, error):  # a helper it calls, recording
        self.worst = max(self.worst, error)


CHECK = Close(0.0)


def workload(rt):
    x = rt.upload(np.arange(64, dtype=np.float32))
    y = rt.buffer(64, "float32")
    for n in (32, 64):  # a tunable per size, made as the workload reaches it
        rt.tune(Tunable(f"sq{n}", {"good": GOOD, "fast": FAST_WRONG}, launch, restore=(1,),
                        check=CHECK), x, y, n)
    return y
"""
)


def test_a_checks_recorded_state_does_not_key_its_tune(
    warm: Warm, producing: ForkedPython, workload_file, bundle_path: Path
) -> None:
    """A check object that records what it saw (its worst error, a count of calls on its
    class) as it runs: that state is no setting, so a production process, whose served
    tunes run no check, is served every tune `warm run` stored (the second tunable's key
    took the state the first tune's checks left, and was never served)."""
    path = workload_file(RECORDING_CHECK)
    assert warm("run", path, "-b", bundle_path, "-q").returncode == 0
    served = produced(producing, warm, TUNED_READ, path, 1, bundle=bundle_path)
    assert served == {"y": 1.0, "tunes": 0}
