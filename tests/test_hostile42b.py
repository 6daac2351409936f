"""Holes hostile42b found in what stop 42 added, each reproduced for real: the real CLI in
a subprocess (real `warm run`s of host workloads, the real C compiler), real SQLite files."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

HOST = """
from warmcli import Kernel
DEVICE = "host"
def workload(rt):
    rt.launch(Kernel("void f(int *x) { x[0] = 1; }", "f", "P"), rt.buffer(1, "int32"))
"""


RAISES_A_CLASS_NAMED_OVER_TWO_LINES = """
import threading
DEVICE = "host"
E = type("Bad\\nLine", (Exception,), {})
def workload(rt):
    if WHERE == "thread":
        t = threading.Thread(target=lambda: (_ for _ in ()).throw(E("m")), name="t1")
        t.start()
        t.join()
    else:
        raise E("m")
"""


def test_an_exception_class_named_with_a_newline_is_said_on_one_line(
    warm: Warm, tmp_path: Path
) -> None:
    """A workload's exception whose class name holds a newline (`type("Bad\\nLine", ...)`):
    its message was escaped (f66d398) but the class name was not, so `warm run` said the
    error over two lines ('...: Bad' then '    Line: m'), and a thread's note alike."""
    path = tmp_path / "w.py"
    path.write_text('WHERE = "entry"\n' + RAISES_A_CLASS_NAMED_OVER_TWO_LINES)
    proc = warm("run", path, "-b", tmp_path / "a.warm")
    said = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0 and len(said) == 1, proc.stderr
    assert "Bad\\x0aLine: m" in said[0], said
    path.write_text('WHERE = "thread"\n' + RAISES_A_CLASS_NAMED_OVER_TWO_LINES)
    proc = warm("run", path, "-b", tmp_path / "b.warm")
    note = [line for line in (proc.stdout + proc.stderr).splitlines() if "thread t1" in line]
    assert note and all(n.endswith("Bad\\x0aLine: m") for n in note), proc.stdout + proc.stderr


@pytest.mark.parametrize("fifo", ["b.warm", "b.warm-journal"])
def test_a_locked_bundle_replaced_by_a_fifo_never_holds_a_read(
    warm: Warm, tmp_path: Path, fifo: str
) -> None:
    """A production process whose bundle was locked at its open retries at a later read
    (`Reopening`): its probe of the lock (`_free`) had SQLite open the file, so a bundle
    replaced meanwhile by a FIFO (`mkfifo`) held that read for ever, waiting for a writer
    of the pipe, and under the Reopening's lock every other thread's read too; where the
    first open refuses a FIFO without waiting (`read_header`). Now the probe finds no
    regular file at once and the open says why, as for a file replaced by no bundle."""
    import os
    import threading

    from warmcli import Bundle
    from warmcli.bundle import reopening
    from warmcli.errors import BundleError, BundleLocked

    path = tmp_path / "b.warm"
    if fifo != path.name:  # a good bundle, a FIFO its journal (its hot-journal look opens it)
        (tmp_path / "w.py").write_text(HOST)
        assert warm("run", tmp_path / "w.py", "-q", "-b", path).returncode == 0
    os.mkfifo(tmp_path / fifo)
    store = reopening.Reopening(str(path), lambda: Bundle.open(path), BundleLocked("locked"))
    store._next = 0.0  # its next try is due
    met: list[BaseException] = []

    def read() -> None:
        try:
            store.kernel("k")
        except BaseException as exc:  # what the read met, checked below
            met.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(3)
    held = reader.is_alive()
    if held:  # held by the FIFO: let it go (a writer opens it), then fail
        fd = os.open(tmp_path / fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        reader.join(5)
    assert not held, "a read was held by the FIFO"  # was: held until a writer opened it
    assert len(met) == 1 and isinstance(met[0], BundleError), met
    assert "FIFO" in store.refused or "not a regular file" in store.refused, store.refused
    store.close()


THREADED = """
import asyncio
import threading
import pycuda.autoinit
import pycuda.driver as drv
from pycuda.compiler import SourceModule

async def ask():
    drv.get_driver_version()

async def asks():
    async with asyncio.TaskGroup() as group:
        group.create_task(ask())

def work():
    mod = SourceModule("__global__ void t(float *x) { x[0] = 1.0f; }")
    asyncio.run(asks())
    mod.get_function("t")(drv.mem_alloc(16), block=(1, 1, 1))

def main():
    thread = threading.Thread(target=work, name="w0")
    thread.start()
    thread.join()
"""


EXIT_FROM = "    asyncio.run(asks())\n"
EXIT_TO = """    try:
        drv.get_driver_version()
    except drv.Error:
        raise SystemExit(1)
"""


@pytest.mark.parametrize("how", ["group", "exit"])
def test_a_thread_ended_by_a_group_holding_the_want_of_a_gpu_fails_the_prebuild(
    warm: Warm, tmp_path: Path, how: str
) -> None:
    """A GPU-less pre-build fails where a thread died of what only the pass refuses (its
    'needs a GPU'), raised from it or while handling it (b5b9f26 walks the chain); but one
    that died of an `ExceptionGroup` holding it (an `asyncio.TaskGroup` whose task asked the
    driver) was a note: the run stored nothing of that thread, called the bundle complete
    and exited 0. The group's exceptions are looked in too now; and a `sys.exit()` while
    handling it (which Python's hook ends silently) fails it too, as another error does."""

    from warmcli.backends.cuda.nvrtc import find_nvrtc

    if find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    script = tmp_path / "grouped.py"
    script.write_text(THREADED if how == "group" else THREADED.replace(EXIT_FROM, EXIT_TO))
    proc = warm("run", script, "--pycuda", "--arch", "sm_90", "-q", "-b", tmp_path / "t.warm")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "in thread w0" in line and "needs a GPU" in line, line
    assert "complete" not in proc.stdout


HUGE_POINTER = """
import pycuda.autoinit
import pycuda.driver as drv
from pycuda.compiler import SourceModule

class Mem(drv.PointerHolderBase):
    def get_pointer(self):
        return 10**5000

def main():
    f = SourceModule("__global__ void t(float *x) { x[0] = 1.0f; }").get_function("t")
    f.prepare("P")
    f.prepared_call((1, 1), (1, 1, 1), int(Mem()))  # as a refused holder is told to
"""


def test_a_pointer_holder_giving_a_huge_int_is_refused_as_such(warm: Warm, tmp_path: Path) -> None:
    """The stand-in's `PointerHolderBase` refuses a `get_pointer()` past 64 bits by naming
    it with `repr`, which raises for an int of over 4,300 digits: the run said
    'ValueError: Exceeds the limit (4300 digits) for integer string conversion', not what
    was wrong. Now such an int is named by its size, anything else by its repr cut."""

    from warmcli.backends.cuda.nvrtc import find_nvrtc

    if find_nvrtc() is None:
        pytest.skip("NVRTC not installed")
    script = tmp_path / "holder.py"
    script.write_text(HUGE_POINTER)
    proc = warm("run", script, "--pycuda", "--arch", "sm_90", "-q", "-b", tmp_path / "t.warm")
    assert proc.returncode != 0, proc.stdout + proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "Mem.get_pointer() gave an int of 16610 bits: PyCUDA takes" in line, line


HUGE_MESSAGE = """
import threading
DEVICE = "host"
def workload(rt):
    def f():
        raise ValueError("x" * 5_000_000)
    thread = threading.Thread(target=f, name="t1")
    thread.start()
    thread.join()
"""


def test_a_thread_raising_a_huge_message_is_noted_cut(warm: Warm, tmp_path: Path) -> None:
    """A thread's uncaught error is a note of each pass, on one line: its message's first
    line was kept whole, so a 5 MB message was 15 MB of notes on the terminal (20 MB: 60 MB
    said, 640 MB of memory). The line is cut after 4,096 characters, saying its length."""
    path = tmp_path / "w.py"
    path.write_text(HUGE_MESSAGE)
    proc = warm("run", path, "-b", tmp_path / "a.warm")
    notes = [line for line in proc.stdout.splitlines() if "thread t1" in line]
    assert proc.returncode == 0 and notes, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert all(n.endswith("(5,000,000 characters)") and len(n) < 5_000 for n in notes), [
        n[-100:] for n in notes
    ]


READS_IN_A_THREAD = """
import threading
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void f(int *x) { x[0] = 1; }", "f", "P")
def workload(rt):
    def go():
        b = rt.buffer(1, "int32")
        rt.launch(K, b)
        rt.read(b)
    t = threading.Thread(target=go, name="t\\n1")
    t.start()
    t.join()
"""


def test_a_thread_named_with_a_newline_failing_the_pass_is_said_on_one_line(
    warm: Warm, tmp_path: Path
) -> None:
    """A thread ended by what only the pass refuses (a discarded read) fails the run naming
    the thread: a name holding a newline (`Thread(name="t\\n1")`) split the error over two
    lines ('... in thread t' then '    1: ...'), where its notes escape it."""
    path = tmp_path / "w.py"
    path.write_text(READS_IN_A_THREAD)
    proc = warm("run", path, "-b", tmp_path / "a.warm")
    said = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0 and len(said) == 1, proc.stderr
    assert "in thread t\\x0a1: " in said[0] and "DiscardedReadError" in said[0], said


def test_a_url_no_parser_splits_never_shows_its_password(warm: Warm, tmp_path: Path) -> None:
    """A URL `urlsplit` cannot split (`https://u:pw@[::1/b.warm`, its `]` forgotten) is
    read as the path it spells, by design; but `Path` spells it `https:/u:pw@[::1/b.warm`,
    which `shown` no longer knows for a URL: `warm stats`, `clean` and `verify` said
    'https:/u:pw@[::1/b.warm: no such bundle', the password whole (`--json` too). Every
    error now withholds it as `shown` does, in a path's spelling too."""
    url = "https://u:pw0rd@[::1/b.warm"
    for args in (("stats", url), ("clean", url), ("verify", url), ("stats", "--json", url)):
        proc = warm(*args)
        said = proc.stdout + proc.stderr
        assert proc.returncode == 2 and "pw0rd" not in said, said
        assert "u:***@[::1/b.warm: no such bundle" in said, said


LAUNCHES_IN_A_LOOP = """
import threading, time
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void f(int *x) { x[0] = 1; }", "f", "P")
def loop(rt, b):
    while True:
        rt.launch(K, b)
def workload(rt):
    b = rt.buffer(1, "int32")
    rt.launch(K, b)
    threading.Thread(target=loop, args=(rt, b), daemon=True, name="looper").start()
    time.sleep(0.2)
"""


def test_a_daemon_thread_launching_in_a_loop_is_not_waited_for(warm: Warm, tmp_path: Path) -> None:
    """A retiring pass waits up to 10 s for a launch another thread had under way, read off
    the threads' stacks; a daemon thread launching a loaded kernel in a loop, which the
    gate lets go on, was found in some launch at each look, so each pass waited the whole
    10 s (a 1 s run took 21 s) and noted it 'still in a launch'. Only the call under way as
    the pass ended (that frame) is waited for now: each of its launches returns at once."""
    import time

    path = tmp_path / "w.py"
    path.write_text(LAUNCHES_IN_A_LOOP)
    started = time.monotonic()
    proc = warm("run", path, "-q", "-b", tmp_path / "a.warm")
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "still in a launch" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert took < 8, took
