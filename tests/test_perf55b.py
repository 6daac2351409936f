"""Stop 55's cuts of `warm run`'s own cost (row `pass_overhead`), held to the behaviour they keep.

The shadowed-module check makes a `Path` of each folder, not of each of ~500 modules' files,
and a whole run still warns of a module beside the workload that it does not get. A pass
whose workload left no thread running ends without a second look at its threads, nor its 1 ms
sleep (`leftovers.join_left`), and one that left a thread running still waits for it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from warmcli.warming import shadowed as shadowed_module


def test_shadowed_makes_a_path_of_each_folder_not_of_each_module(tmp_path, monkeypatch):
    """~500 modules in ~40 folders: a `Path` made and hashed per module cost ~7 ms a run."""
    made = []
    real = shadowed_module.Path

    def counted(*parts: object) -> Path:
        made.append(parts)
        return real(*parts)

    folders = [tmp_path / f"f{i}" for i in range(4)]
    names = []
    for i in range(400):
        folder = folders[i % 4]
        folder.mkdir(exist_ok=True)
        module = types.ModuleType(f"p55b_mod{i}")
        module.__file__ = str(folder / f"m{i}.py")
        names.append(module.__name__)
        sys.modules[module.__name__] = module
    workload = tmp_path / "work" / "workload.py"
    workload.parent.mkdir()
    workload.write_text("")
    monkeypatch.setattr(shadowed_module, "Path", counted)
    try:
        assert shadowed_module.shadowed(workload) == []
    finally:
        for name in names:
            del sys.modules[name]
    assert len(made) < 100, len(made)  # (before: one per module, 400 of these and more)


def test_a_warm_run_still_warns_of_a_module_beside_it_and_stores_every_kernel(warm, tmp_path):
    """The whole run, real: a `copy.py` beside the workload is warned of, all stored, verified."""
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "copy.py").write_text("X = 1\n")
    workload = folder / "w.py"
    workload.write_text(
        "import copy\nfrom warmcli import Kernel\nDEVICE = 'host'\n"
        "K = Kernel('void k(float *x, int n) { for (int i = 0; i < n; i++) x[i] = 1.0f; }', "
        "'k', 'Pi')\n"
        "def workload(rt):\n    x = rt.buffer(4, 'float32')\n    rt.launch(K, x, 4)\n"
    )
    bundle = tmp_path / "b.warm"
    proc = warm("run", workload, "--bundle", bundle, "--json")
    assert proc.returncode == 0, proc.stderr
    assert "copy.py beside the workload is not the copy it imports" in proc.stderr
    report = json.loads(proc.stdout)
    assert report["stored"]["kernels"] == 1 and report["verified"] is True, report


# `join_left` in a fresh process, its sleeps counted: with no thread left, and with one the
# workload left running (which it waits for, as before).
JOINED = """
import sys, threading, time
from warmcli.warming import leftovers
slept, real_sleep = [], time.sleep
running = set(threading.enumerate())
done = []
if sys.argv[1] == "left":
    threading.Thread(target=lambda: (real_sleep(0.2), done.append(1))).start()
time.sleep = lambda s: (slept.append(s), real_sleep(s))
leftovers.join_left(running)
print(len(slept), len(done))
"""


@pytest.mark.parametrize("left", ["none", "left"])
def test_a_pass_that_left_no_thread_ends_without_a_sleep(left):
    done = subprocess.run(
        [sys.executable, "-c", JOINED, left], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    slept, finished = map(int, done.stdout.split())
    if left == "none":
        assert (slept, finished) == (0, 0)  # (before: one 1 ms sleep, a second look)
    else:
        assert finished == 1  # waited for the thread the workload left running
