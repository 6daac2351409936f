"""Review of leftovers42a (review42a): a late launch under way while its pass's runtime is
retired, a process reopening a bundle locked at its open, key= values wide or cyclic, and
errors that reach the terminal on one line. Its `warm` commands each a fork of a process
that imported the CLI once (`tests/forked_cli.py`): none is of how a process starts."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from subprocess import PIPE
from typing import Any

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_leftovers42a import FILLS, HOLD  # the workload and the lock holder

from warmcli import Bundle, Kernel, ProcessMode, ProcessModeOverride, Runtime
from warmcli.backends.host.device import HostDevice
from warmcli.execution.statistics import StatisticsCollector
from warmcli.warming import ended

ROOT = Path(__file__).resolve().parent.parent

LATE = Kernel("void late(int *x) { x[0] = 7; }", "late", "P")


class HeldHost(HostDevice):
    """The real host device, but a launch from the thread named 'late' is held (until
    `release` is set) where the kernel's key is made, before the bundle is looked up."""

    def __init__(self) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        super().__init__()

    @property  # type: ignore[override]
    def arch(self) -> str:
        if threading.current_thread().name == "late" and not self.release.is_set():
            self.entered.set()
            self.release.wait(10)
        return self._arch

    @arch.setter
    def arch(self, value: str) -> None:
        self._arch = value


def _late_launch(rt: Runtime, errors: list[BaseException]) -> threading.Thread:
    def late() -> None:
        try:
            rt.launch(LATE, rt.buffer(1, "int32"))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=late, name="late", daemon=True)
    thread.start()
    return thread


def test_retire_waits_for_a_launch_under_way_before_its_bundle_closes(tmp_path: Path) -> None:
    # A warming pass's runtime (no miss policy): a daemon thread's launch passed the retired
    # gate, held before its bundle lookup while the pass ends and the next one runs.
    Bundle.create(tmp_path / "b.warm").close()
    device, errors = HeldHost(), []
    ending, nxt = StatisticsCollector(), StatisticsCollector()
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE, ending):
        bundle = Bundle.open(tmp_path / "b.warm")
        rt = Runtime(device, bundle, misses=None)
        thread = _late_launch(rt, errors)
        assert device.entered.wait(10)  # past the retired gate, held before its lookup
        threading.Timer(0.3, device.release.set).start()
        started = time.monotonic()
        ended.retire(rt)
        waited = time.monotonic() - started
        bundle.close()  # as a pass closes its bundle once its runtimes are retired
    with ProcessModeOverride(ProcessMode.EXECUTE, nxt):  # the verify pass
        thread.join(10)
    rt.close()
    said = [m.reason for m in nxt.reader().misses()]
    assert said == [], said  # was: 'corrupt: bundle's entry: closed', the verify's own
    assert errors == [] and not thread.is_alive()
    assert waited >= 0.2, waited  # retire waited for the launch under way


def test_a_launch_under_way_past_the_wait_is_noted_and_no_miss_of_the_next_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Held past the wait (a launch that never returns, as far as retire knows): the pass goes
    # on, says so, and what the thread then reads of the closed bundle is no one's miss.
    monkeypatch.setattr(ended, "LATE_WAIT_SECONDS", 0.2)
    Bundle.create(tmp_path / "b.warm").close()
    device, errors = HeldHost(), []
    ending, nxt = StatisticsCollector(), StatisticsCollector()
    with ProcessModeOverride(ProcessMode.COMPILE_AND_AUTOTUNE, ending):
        bundle = Bundle.open(tmp_path / "b.warm")
        rt = Runtime(device, bundle, misses=None)
        thread = _late_launch(rt, errors)
        assert device.entered.wait(10)
        started = time.monotonic()
        ended.retire(rt)
        waited = time.monotonic() - started
        bundle.close()
    with ProcessModeOverride(ProcessMode.EXECUTE, nxt):
        device.release.set()  # it goes on now, its bundle closed, the next pass running
        thread.join(10)
    rt.close()
    assert 0.15 <= waited < 5, waited
    notes = ending.reader().notes() + nxt.reader().notes()
    assert nxt.reader().misses() == [] and errors == []
    from warmcli.execution.process_mode import default_collector

    said = [n for n in default_collector().reader().notes() if "thread late still" in n]
    assert said and "0.2 s after its pass ended: not waited for further" in said[0], notes


# A production process started while a writer holds its bundle's lock, named by a relative
# WARM_BUNDLE (the waits shortened, as tests/test_leftovers42a.py shortens them): its report
# says the bundle is locked, not that none is set; it changes its folder, as a daemon does,
# and still serves its bundle once the lock is free.
LATE_OPEN = """
import os, sys, time
import warmcli.bundle.file as bundle_file
bundle_file.LOCK_WAIT_SECONDS = 1.0
import warmcli.bundle.reopening as reopening
reopening.REOPEN_SECONDS = 0.3
from warmcli import Kernel
import warmcli
SRC = "void fill(double *o, int n) { for (int i = 0; i < n; i++) o[i] = i / (DIV) + 0.5; }"
rt = warmcli.runtime("host")
def launch(d):
    o = rt.buffer(5, "float64")
    rt.launch(Kernel(SRC, "fill", "Pi", defines={"DIV": d}), o, 5)
    return rt.read(o).tolist()
launch(3)
print(str(warmcli.report()).splitlines()[0], flush=True)
os.chdir(sys.argv[1])  # a daemon's folder
input()  # the lock is free now
time.sleep(0.4)
launch(5), launch(6)
print(str(warmcli.report()).splitlines()[0], flush=True)
"""


def test_a_process_whose_bundle_was_locked_at_its_open_says_so_and_serves_after_a_chdir(
    warm: Warm, tmp_path: Path
) -> None:
    (tmp_path / "fills.py").write_text(FILLS)
    proc = warm("run", "-q", "--bundle", tmp_path / "b.warm", tmp_path / "fills.py")
    assert proc.returncode == 0, proc.stderr
    (tmp_path / "elsewhere").mkdir()
    env = dict(warm.env, WARM_BUNDLE="b.warm", PYTHONPATH=str(ROOT), WARM_REPORT="")
    run = [sys.executable, "-c"]
    holder = subprocess.Popen(
        [*run, HOLD, "b.warm"], cwd=tmp_path, stdin=PIPE, stdout=PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        server = subprocess.Popen(
            [*run, LATE_OPEN, str(tmp_path / "elsewhere")],
            cwd=tmp_path,
            env=env,
            stdin=PIPE,
            stdout=PIPE,
            stderr=PIPE,
            text=True,
        )
        assert server.stdout is not None
        first = server.stdout.readline()
        holder.communicate("\n", timeout=10)  # its commit ends
        out, err = server.communicate("\n", timeout=30)
    finally:
        holder.kill()
    assert server.returncode == 0, err
    whole = tmp_path / "b.warm"
    assert first.startswith(
        f"warm: bundle {whole} not loaded yet: another process held its lock"
    ), first
    assert "no bundle is loaded" not in first and "compiled 1 kernel(s)" in first, first
    # Served from the bundle it named, not from a b.warm in the folder it moved to:
    assert out.startswith(f"warm: bundle {whole} lacked 1 kernel(s)"), out
    assert not (tmp_path / "elsewhere" / "b.warm").exists()


class _FakeSlowOpener:
    """A fake opener (pure logic of `Reopening`): holds its caller until `release` is set,
    then gives a real empty bundle; counts its calls, and says when one has been released."""

    def __init__(self, path: Path) -> None:
        self.path, self.calls, self.released = path, 0, False
        self.entered, self.release = threading.Event(), threading.Event()

    def __call__(self) -> Bundle:
        self.calls += 1
        self.entered.set()
        self.release.wait(10)
        self.released = True
        return Bundle.open(self.path)


def _reopening(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, _FakeSlowOpener]:
    from warmcli.bundle import reopening
    from warmcli.errors import BundleLocked

    monkeypatch.setattr(reopening, "REOPEN_SECONDS", 0.0)
    Bundle.create(tmp_path / "b.warm").close()
    opener = _FakeSlowOpener(tmp_path / "b.warm")
    store = reopening.Reopening(str(tmp_path / "b.warm"), opener, BundleLocked("b.warm: locked"))
    return store, opener


def test_a_read_while_another_thread_reopens_the_bundle_is_cold_at_once_not_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from warmcli.errors import BundleLocked

    store, opener = _reopening(tmp_path, monkeypatch)
    first = threading.Thread(target=lambda: store.kernel("k"), daemon=True)
    first.start()
    assert opener.entered.wait(10)  # the first read opens it (slowly: locked again, say)
    with pytest.raises(BundleLocked):
        store.kernel("k")  # another thread's read: cold now, not held for the open
    assert opener.calls == 1 and not opener.released  # one open, under way still: no herd
    opener.release.set()
    first.join(10)
    assert store.bundle is not None
    store.close()


def test_a_reopening_closed_while_it_opens_closes_what_the_open_gave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from warmcli.errors import BundleLocked

    store, opener = _reopening(tmp_path, monkeypatch)
    met: list[BaseException] = []

    def read() -> None:
        try:
            store.kernel("k")
        except BaseException as exc:
            met.append(exc)

    first = threading.Thread(target=read, daemon=True)
    first.start()
    assert opener.entered.wait(10)
    closer = threading.Thread(target=store.close, daemon=True)  # use_bundle(), say
    closer.start()
    closer.join(1.0)
    assert not closer.is_alive()  # not held for the open either
    opener.release.set()
    first.join(10)
    assert store.bundle is None and len(met) == 1 and isinstance(met[0], BundleLocked)


NAMES_A_PATH = """
import warmcli
DEVICE = "host"
def workload(rt):
    warmcli.use_bundle(BAD)
"""
FAILS_TO_COMPILE = """
from warmcli import Kernel
DEVICE = "host"
def workload(rt):
    rt.launch(Kernel("void f(int *x) { x[0] = ; }", "f", "P"), rt.buffer(1, "int32"))
"""

EVERY_CANDIDATE_FAILS = """
from warmcli import Kernel, Tunable
DEVICE = "host"
SRC = "void t(int *p, int n) { p[0] = V }"
def launch(rt, k, b, n, *, stream=None):
    rt.launch(k, b, n, stream=stream)
KERNELS = {f"v{i}": Kernel(SRC, "t", "Pi", defines={"V": i}) for i in (1, 2)}
T = Tunable("bad", KERNELS, launch, key=lambda b, n: "x\\ny")
def workload(rt):
    rt.tune(T, rt.buffer(4, "int32"), 1)
"""


def test_warms_own_error_a_workload_raised_is_one_line_but_a_compile_log(
    warm: Warm, tmp_path: Path
) -> None:
    bad = str(tmp_path / "no\nsuch.warm")
    path = tmp_path / "w.py"
    path.write_text(f"BAD = {bad!r}\n" + NAMES_A_PATH)
    proc = warm("run", path, "-b", tmp_path / "a.warm")
    said = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode != 0 and len(said) == 1, proc.stderr  # was: the path over two lines
    assert "BundleError: " in said[0] and "no\\x0asuch.warm: no such bundle" in said[0], said
    path.write_text(FAILS_TO_COMPILE)
    proc = warm("run", path, "-b", tmp_path / "b.warm")
    lines = proc.stderr.splitlines()
    assert proc.returncode != 0 and lines[0].endswith(
        "KernelCompileError: kernel f failed to compile:"
    )
    assert any("error: expected expression" in line for line in lines[1:]), proc.stderr
    path.write_text(EVERY_CANDIDATE_FAILS)  # its key's newline escaped, its list kept
    proc = warm("run", path, "-b", tmp_path / "c.warm")
    lines = proc.stderr.splitlines()
    assert proc.returncode != 0 and lines[0].endswith(": tune bad x\\x0ay: every candidate failed")
    assert [line.split(":")[0].strip() for line in lines[1:3]] == ["- v1", "- v2"], proc.stderr


def _nested(leaf: Any, depth: int) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


_CYCLE: list[Any] = []
_CYCLE.append(_CYCLE)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        # JSON writes it (an object's text), then the walk naming the part holding an
        # address recursed past the limit: was a bare RecursionError naming no tunable.
        # (3.12 on count no C call against that limit: 900 deep, the walk ended, naming the
        # address; their JSON encoder writes 1,200 deep, which the walk cannot: that case there.)
        (
            _nested(object(), 900 if sys.version_info < (3, 12) else 1200),
            "key= gave a value nested too deeply to key",
        ),
        (list(range(10**6)), "its tune key's text is 7888890 characters, over the"),
        (_CYCLE, "key= gave a value with no JSON text: Circular reference detected"),
        ({(1, 2): 3}, "key= gave a value with no JSON text: keys must be str, int"),
    ],
    ids=["deep-object", "wide", "cycle", "tuple-key"],
)
def test_a_key_value_deep_wide_or_cyclic_is_one_line_naming_the_tunable(
    value: Any, said: str
) -> None:
    from warmcli import Tunable
    from warmcli.errors import TuneSpecError

    source = "void touch(int *p, int n) { if (n < 0) p[0] = V; }"
    kernels = {f"v{i}": Kernel(source, "touch", "Pi", defines={"V": i}) for i in (1, 2)}
    tunable = Tunable("odd", kernels, lambda rt, k, b, n: None, key=lambda b, n: value)
    rt = Runtime(HostDevice())
    try:
        with pytest.raises(TuneSpecError) as raised:
            rt.tune(tunable, rt.buffer(4, "int32"), 1)
    finally:
        rt.close()
    text = str(raised.value)
    assert text.startswith(f"tunable odd: {said}") and "\n" not in text, text


def test_a_child_forked_while_another_thread_reopens_the_bundle_opens_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    store, opener = _reopening(tmp_path, monkeypatch)
    first = threading.Thread(target=lambda: store.kernel("k"), daemon=True)
    first.start()
    assert opener.entered.wait(10)  # the parent's open under way as it forks
    pid = os.fork()
    if pid == 0:  # the child: that thread is not here; its own read opens the bundle
        code = 1
        try:
            opener.release.set()
            store.kernel("k")
            code = 0 if store.bundle is not None else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    opener.release.set()
    first.join(10)
    store.close()
    assert os.waitstatus_to_exitcode(status) == 0  # was: BundleLocked for its whole life


def _fill(d: int) -> Kernel:
    source = "void fill(double *o, int n) { for (int i = 0; i < n; i++) o[i] = i / (DIV) + 0.5; }"
    return Kernel(source, "fill", "Pi", defines={"DIV": d})


def test_a_write_back_with_nothing_served_stamps_a_kernel_another_writer_stored_alike(
    tmp_path: Path,
) -> None:
    # Two writers build kernel 3; the first stores it; the second, served nothing, stores
    # kernel 4 and holds the first's row of 3: both are its kernels, used at its one time.
    import sqlite3

    path = tmp_path / "b.warm"
    Bundle.create(path).close()
    with Bundle.open(path, write=True) as first, Bundle.open(path, write=True) as second:
        one, two = Runtime(HostDevice(), first), Runtime(HostDevice(), second)
        with ProcessModeOverride(ProcessMode.EXECUTE):
            for rt, kernels in ((one, (3,)), (two, (3, 4))):
                for d in kernels:
                    rt.launch(_fill(d), rt.buffer(5, "float64"), 5)
        assert one.persist(first) == (1, 0)
        time.sleep(0.05)
        assert two.persist(second) == (1, 0)  # kernel 4; kernel 3 held (the first's row)
        one.close()
        two.close()
    keys = {d: two.kernels.key(_fill(d)) for d in (3, 4)}
    with sqlite3.connect(path) as conn:
        used = dict(conn.execute("SELECT key, last_used FROM kernels").fetchall())
    assert used[keys[3]] == used[keys[4]], used  # was: kernel 3 kept the first writer's time


def test_a_bundle_replaced_by_no_bundle_while_locked_is_said_in_the_report(tmp_path: Path) -> None:
    from warmcli.bundle import reopening
    from warmcli.errors import BundleError, BundleLocked
    from warmcli.production_report import ProductionReport

    path = tmp_path / "b.warm"
    path.write_text("garbage\n")  # the file put in its place while it was locked
    store = reopening.Reopening(str(path), lambda: Bundle.open(path), BundleLocked("locked"))
    store._next = 0.0  # its next try is due
    with pytest.raises(BundleError, match="not a warm bundle"):
        store.kernel("k")
    assert "not a warm bundle" in store.refused and store.bundle is None
    said = str(ProductionReport(bundle=str(path), write=False, locked=store.refused))
    assert said.startswith(f"warm: bundle {path} not loaded yet: another process held its lock")
    assert f"every 5 s, then: {path}: not a warm bundle" in said, said  # was: locked, only
    store.close()
