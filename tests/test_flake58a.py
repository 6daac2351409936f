"""Interrupts that land at points a signal sent by hand rarely hits, set there on purpose.

Found by sending SIGINT, SIGTERM and SIGHUP to real `warm` commands after random delays under
load (stop 58): each point here left something behind in a few runs in a hundred. The pending
Ctrl-C is set by `_thread.interrupt_main` from a wrapper of warm's own function at that point
(the real function still runs: the interrupt lands at its first Python line, or just after it),
in the real CLI in a subprocess, with a real C compiler and real bundles.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from big_bundle import build_big
from conftest import ROOT, Warm, nvcc_or_skip
from test_reliability import compiler_wrapper

WORKLOAD = """
from warmcli import Kernel

DEVICE = "host"
KS = [Kernel(f"void k{i}(float *x) {{ x[0] += {i}.0f; }}", f"k{i}", "P") for i in range(4)]

def workload(rt):
    x = rt.buffer(4)
    for k in KS:
        rt.launch(k, x)
    rt.synchronize()
"""

# The CLI run as `python -m warmcli` runs it, `module.name` (`name` may be a class's
# `Class.method`) wrapped first so that a Ctrl-C is pending as it is called ("before") or as it
# returns ("after"), once, where `needle` is in one of its arguments' texts (any call where it
# is "").
POKED_CLI = """
import _thread, importlib, runpy, sys
module, name, when, needle = sys.argv[1:5]
target = importlib.import_module(module)
*owners, name = name.split(".")
for owner in owners:
    target = getattr(target, owner)
real = getattr(target, name)
poked = []
def wrapper(*args, **kwargs):
    hit = not poked and any(needle in str(a) for a in (*args, *kwargs.values(), ""))
    if hit and when == "before":
        poked.append(_thread.interrupt_main())
    result = real(*args, **kwargs)
    if hit and when == "after":
        poked.append(_thread.interrupt_main())
    return result
setattr(target, name, wrapper)
sys.argv = ["warm", *sys.argv[5:]]
runpy.run_module("warmcli", run_name="__main__", alter_sys=True)
"""


def poked_warm(
    warm: Warm, point: tuple[str, str, str, str], *args: str | Path
) -> subprocess.CompletedProcess[str]:
    """`warm *args` with a Ctrl-C pending at `point` (`POKED_CLI`'s module, name, when, needle)."""
    return subprocess.run(
        [sys.executable, "-c", POKED_CLI, *point, *map(str, args)],
        capture_output=True, text=True, env=warm.env, cwd=ROOT, timeout=300,
    )  # fmt: skip


NOTHING_KEPT = "warm: interrupted: 0 kernel(s) and 0 tune(s) stored are kept"


@pytest.mark.parametrize(
    "point",
    [
        ("warmcli.bundle.file", "_write_empty", "before", ""),  # its lock file was left
        ("warmcli.bundle.journal", "publish", "after", ""),  # the empty bundle and its lock
    ],
    ids=["writing-the-empty-bundle", "the-empty-bundle-published"],
)
def test_a_first_run_interrupted_as_it_makes_its_bundle_leaves_nothing(
    warm: Warm, tmp_path: Path, point: tuple[str, str, str, str]
) -> None:
    """A Ctrl-C landing while the first run made its new bundle (`Bundle.create`, before the
    open returned) left `b.warm.lock`, and the empty `b.warm` once it was published (its
    folder too, which the run had made): the clean-up ran only for a bundle that opened.
    Now nothing is left, as by an interrupt a moment later (README: a first run that fails
    before storing anything leaves neither the bundle nor its `.lock`)."""
    (tmp_path / "w.py").write_text(WORKLOAD)
    bundle = tmp_path / "made" / "b.warm"
    done = poked_warm(warm, point, "run", tmp_path / "w.py", "--bundle", bundle)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == NOTHING_KEPT, done.stderr
    assert not bundle.parent.exists(), sorted(p.name for p in bundle.parent.iterdir())
    again = warm("run", tmp_path / "w.py", "--bundle", bundle)  # and the next run stores it
    assert again.returncode == 0, again.stderr
    assert len(warm.json("stats", bundle)["kernels"]) == 4


def test_a_first_run_interrupted_waiting_for_another_writer_leaves_its_lock(
    warm: Warm, tmp_path: Path
) -> None:
    """Interrupted while it waited for the lock another writer holds on the new bundle's
    path (another first run making it), the run removes nothing of it and does not wait for
    that lock again (this test holds it to the end: a second wait would never end)."""
    (tmp_path / "w.py").write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    lock = os.open(f"{bundle}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        point = ("warmcli.bundle.lock", "_flock_within", "before", "b.warm.lock")
        done = poked_warm(warm, point, "run", tmp_path / "w.py", "--bundle", bundle)
        assert done.returncode == 130, done.stderr
        assert done.stderr.strip() == NOTHING_KEPT, done.stderr
        assert sorted(p.name for p in tmp_path.iterdir() if "warm" in p.name) == ["b.warm.lock"]
    finally:
        os.close(lock)


def test_an_interrupt_as_a_compile_thread_starts_waits_for_its_compile(
    warm: Warm, tmp_path: Path
) -> None:
    """A Ctrl-C landing in the compile pool's `submit` as it started a thread (`t.start()`
    waits for it to run) left that thread out of the pool's own list, so the batch's
    `shutdown(wait=True)` never waited for it: the worker ended (`os._exit`) in the middle of
    its compile, and its `warm-cc-*` scratch folder (batch.c, cc's `.s`) stayed in TMPDIR
    (10 runs in 300 of `warm run` signalled at random under load). Here the compile sleeps
    first, so that it is surely running as the worker ends."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    warm.env["TMPDIR"] = str(tmp)
    warm.env["WARM_CC"] = str(compiler_wrapper(tmp_path, "sleep 20"))
    (tmp_path / "w.py").write_text(WORKLOAD)
    bundle = tmp_path / "b.warm"
    point = ("threading", "Thread.start", "after", "warm-compile")
    done = poked_warm(warm, point, "run", tmp_path / "w.py", "--bundle", bundle)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == NOTHING_KEPT, done.stderr
    assert not list(tmp.iterdir()), "warm left temporary files"


def test_an_interrupted_nvcc_probe_leaves_no_file_in_tmpdir(warm: Warm, tmp_path: Path) -> None:
    """`warm clean` of a bundle with CUDA kernels asks `nvcc --dryrun -E -x cu /dev/null` its
    include folders; nvcc makes its `tmpxft_*` files in TMPDIR even then, and one killed (as
    an interrupt kills every process warm started) leaves them there: the user's TMPDIR
    (4 runs in 50 of `warm clean` signalled at random under load). A probe now runs, as a
    compile does, with its TMPDIR a scratch folder of warm's, removed after it. The stand-in
    nvcc makes such a file, then waits to be stopped."""
    nvcc_or_skip()
    tmp, started = tmp_path / "tmp", tmp_path / "started"
    tmp.mkdir()
    nvcc = tmp_path / "nvcc"
    nvcc.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --dryrun ]; then\n'
        f'  : > "${{TMPDIR:-/tmp}}/tmpxft_00000001_00000000-1"; : > {started}; sleep 300\n'
        "fi\n"
        'exec nvcc "$@"\n'
    )
    nvcc.chmod(0o755)
    warm.env.update(TMPDIR=str(tmp), WARM_NVCC=str(nvcc))
    bundle = build_big(tmp_path / "b.warm", 10, 10)
    proc = warm.popen("clean", bundle)
    while not started.exists():
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    assert err.strip() == "warm: interrupted", err
    assert not list(tmp.iterdir()), "warm left temporary files"


def test_an_interrupt_as_the_compiler_probe_starts_stops_it(warm: Warm, tmp_path: Path) -> None:
    """A Ctrl-C landing in `CompilerProbe` as its thread started (`Thread.start` waits for it
    to run) left the run without the probe to stop: the thread ran on, its
    `-print-search-dirs` too, as the worker ended, and that probe's scratch folder
    (`warm-probe-*`, its TMPDIR since the previous commit) stayed in TMPDIR (1 run in 100
    signalled at random). The stand-in cc makes a file in its TMPDIR there, then waits."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    warm.env["TMPDIR"] = str(tmp)
    script = tmp_path / "cc"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = -print-search-dirs ]; then : > "$TMPDIR/probed"; sleep 20; fi\n'
        'exec cc "$@"\n'
    )
    script.chmod(0o755)
    warm.env["WARM_CC"] = str(script)
    (tmp_path / "w.py").write_text(WORKLOAD)
    point = ("threading", "Thread.start", "after", "warm-probe")
    done = poked_warm(warm, point, "run", tmp_path / "w.py", "--bundle", tmp_path / "b.warm")
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == NOTHING_KEPT, done.stderr
    assert not list(tmp.iterdir()), "warm left temporary files"


def test_an_interrupt_before_the_probe_thread_ran_is_still_a_keyboard_interrupt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Cut short before its thread is marked started (`Thread.start` raised in `_started.wait()`
    or before the thread was made, here), `CompilerProbe`'s stop joined it, and `join` refused:
    RuntimeError('cannot join thread before it is started') in the KeyboardInterrupt's place."""
    from warmcli.warming.probe import CompilerProbe

    def cut(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(threading, "_start_new_thread", cut)
    with pytest.raises(KeyboardInterrupt):  # (before: RuntimeError)
        CompilerProbe([], [])


# The CLI with `logging` imported (as by any library a workload uses), its fork hook's WeakSet
# one that sets a pending Ctrl-C as a forked child first iterates it: in `warm run`'s worker.
POKED_FORK = """
import logging, os, runpy, signal, sys, weakref
class Poking(weakref.WeakSet):
    poked = False
    def __iter__(self):
        if not Poking.poked:
            Poking.poked = True
            os.kill(os.getpid(), signal.SIGINT)  # a real one: the fork's mask applies
        return super().__iter__()
logging._at_fork_reinit_lock_weakset = Poking(logging._at_fork_reinit_lock_weakset)
sys.argv = ["warm", *sys.argv[1:]]
runpy.run_module("warmcli", run_name="__main__", alter_sys=True)
"""


def test_a_stop_landing_in_loggings_fork_hook_is_not_lost(warm: Warm, tmp_path: Path) -> None:
    """A SIGHUP forwarded to `warm run`'s worker as it ran `logging`'s after-fork hook (the
    supervisor's handler, not yet replaced there) raised KeyboardInterrupt where Python only
    prints it: 'Exception ignored in: <function _after_at_fork_child_reinit_locks>' and its
    traceback on stderr (1 of ~1,500 runs signalled at random), the stop lost there. Now it is
    sent again once the hook is left, as in warm's own fork hooks: one line, exit 130."""
    (tmp_path / "w.py").write_text(WORKLOAD)
    done = subprocess.run(
        [sys.executable, "-c", POKED_FORK, "run", tmp_path / "w.py", "-b", tmp_path / "b.warm"],
        capture_output=True, text=True, env=warm.env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == NOTHING_KEPT, done.stderr
