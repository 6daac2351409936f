"""Stop 55's cuts of `warm run`'s own cost (row `pass_overhead`), held to the behaviour they keep.

A first run's host compiler identity asks `cc -print-search-dirs`, then the `as` and `ld` it
names, while `cc --version` runs, not after it (`host.compiler.found_anew`): two real children
of a real compiled "cc" that each wait for the other end only where both run at once, and the
identity found so is the one asked one after the other (every kernel key the same). The
shadowed-module check makes a `Path` of each folder, not of each of ~500 modules' files. A pass
whose workload left no thread running ends without a second look at its threads, nor its 1 ms
sleep (`leftovers.join_left`), and one that left a thread running still waits for it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fake_modules import spread_modules

from warmcli.warming import shadowed as shadowed_module

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "matmul_host.py"


def test_shadowed_makes_a_path_of_each_folder_not_of_each_module(tmp_path, monkeypatch):
    """~500 modules in ~40 folders: a `Path` made and hashed per module cost ~7 ms a run."""
    made = []
    real = shadowed_module.Path

    def counted(*parts: object) -> Path:
        made.append(parts)
        return real(*parts)

    with spread_modules(tmp_path, "p55b_mod") as (_, workload):
        files = [
            f
            for m in list(sys.modules.values())
            if isinstance(f := getattr(m, "__file__", None), str)
        ]
        folders_seen = {os.path.dirname(f) for f in files}
        links = sum(os.path.islink(f) for f in files)
        monkeypatch.setattr(shadowed_module, "Path", counted)
        assert shadowed_module.shadowed(workload) == []
    # one a folder (and a linked file), the workload's own: not one a module (before: 400 more)
    assert len(made) <= len(folders_seen) + links + 4 < len(files), (len(made), len(files))


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


# A "cc" whose `--version` and `-print-search-dirs` each wait (10 s at most) for the other's
# mark in MEET: it says whether they met in its answers, so they ran at once only if "met".
MEETING_CC = r"""
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(int argc, char **argv) {
    int version = argc > 1 && strcmp(argv[1], "--version") == 0;
    char mine[4096], theirs[4096];
    snprintf(mine, sizeof mine, "%s/%s", MEET, version ? "version" : "folders");
    snprintf(theirs, sizeof theirs, "%s/%s", MEET, version ? "folders" : "version");
    close(open(mine, O_CREAT | O_WRONLY, 0644));
    int met = 0;
    for (int i = 0; i < 1000 && !met; i++) {
        met = access(theirs, F_OK) == 0;
        if (!met) usleep(10000);
    }
    if (version) printf("meetingcc (%s) 1.0\n", met ? "met" : "alone");
    else printf("install: %s/\nprograms: =%s\nlibraries: =%s\n", MEET, MEET, MEET);
    return 0;
}
"""

# cc's identity found anew in a fresh home: at once (`found_anew`), or one after the other.
IDENTITY = """
import os, sys
from warmcli.backends.host import compiler, programs
from warmcli.backends.toolchain import probe
cc, search = sys.argv[1], os.environ["PATH"]
if sys.argv[2] == "at once":
    print(compiler.found_anew(cc, (), search).version)
else:
    found = probe("cc", cc)
    print(found.version + programs.programs_line(found, (), search))
"""


def _identity(cc: str, how: str, home: Path) -> str:
    env = {**os.environ, "WARM_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-c", IDENTITY, cc, how], capture_output=True, text=True, env=env,
        timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_first_runs_cc_version_and_its_program_folders_are_asked_at_once(tmp_path):
    meet = tmp_path / "meet"
    meet.mkdir()
    source = tmp_path / "meeting.c"
    source.write_text(MEETING_CC)
    cc = tmp_path / "bin" / "meetingcc"
    cc.parent.mkdir()
    subprocess.run(["cc", f'-DMEET="{meet}"', "-o", str(cc), str(source)], check=True)
    identity = _identity(str(cc), "at once", tmp_path / "home")
    assert identity.startswith("meetingcc (met) 1.0; as "), identity  # (one after: "alone")
    assert "; ld " in identity


def test_the_identity_asked_at_once_is_the_one_asked_one_after_the_other(tmp_path):
    """The system cc's identity, which keys every host kernel: the same either way."""
    at_once = _identity("cc", "at once", tmp_path / "home1")
    one_by_one = _identity("cc", "one after the other", tmp_path / "home2")
    assert at_once == one_by_one
    assert "; as " in at_once and "; ld " in at_once


def test_a_wrapper_script_cc_is_asked_one_after_the_other_as_before(tmp_path):
    """A script's identity (its digest) is not asked ahead: the same as one after the other."""
    script = tmp_path / "bin" / "wrapcc"
    script.parent.mkdir()
    script.write_text('#!/bin/sh\nexec cc "$@"\n')
    script.chmod(0o755)
    at_once = _identity(str(script), "at once", tmp_path / "home1")
    assert at_once == _identity(str(script), "one after the other", tmp_path / "home2")
    assert "wrapper script" in at_once


# The real `warm run` of the host example, each SQL statement its bundle's connections run
# written to a file (SQLite's trace callback), then `warm verify` of what it stored.
TRACED_RUN = """
import _sqlite3, os, runpy, sys
real = _sqlite3.connect
def connect(*args, **kwargs):
    conn = real(*args, **kwargs)
    conn.set_trace_callback(lambda s: open(os.environ["TRACE"], "a").write(s[:60] + "\\n"))
    return conn
_sqlite3.connect = connect
sys.argv = ["warm", *sys.argv[1:]]
runpy.run_module("warmcli", run_name="__main__")
"""


def test_a_groups_shared_object_is_written_once_not_once_a_kernel(warm, tmp_path):
    """The host example's 6 kernels are built in 2 groups, each one shared object: 6
    `INSERT OR REPLACE INTO blobs` of ~10 KB each before, 2 now; all served and verified."""
    bundle, trace = tmp_path / "b.warm", tmp_path / "trace.txt"
    env = {**warm.env, "TRACE": str(trace)}
    args = [sys.executable, "-c", TRACED_RUN, "run", str(EXAMPLE), "--bundle", str(bundle), "-j2"]
    done = subprocess.run([*args, "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["stored"]["kernels"] == 6 and report["verified"] is True, report
    groups = report["passes"][1]["compilation"]["compiler_processes"]
    inserted = trace.read_text().count("INSERT OR REPLACE INTO blobs")
    assert inserted == groups < 6, (inserted, groups)
    checked = warm("verify", bundle, "--json")
    assert checked.returncode == 0, checked.stdout + checked.stderr


# Two threads of one process remember into warm's home at once (`folder_held`): the second
# waits for the first's turn, without polling its `flock` (each poll a 2 ms sleep), and never
# inside the first's block.
TURNS = """
import os, sys, threading, time
from warmcli import home
folder, order, slept = sys.argv[1], [], []
real_sleep = time.sleep
first_in = threading.Event()
def first():
    with home.folder_held(folder):
        order.append("first in")
        first_in.set()
        real_sleep(0.2)
        order.append("first out")
def second():
    first_in.wait()
    time.sleep = lambda s: (slept.append(s), real_sleep(s))
    with home.folder_held(folder):
        order.append("second in")
threads = [threading.Thread(target=first), threading.Thread(target=second)]
for t in threads: t.start()
for t in threads: t.join()
print(len(slept), " | ".join(order))
"""


def test_a_second_thread_takes_its_turn_at_the_home_folder_without_polling(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", TURNS, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    slept, order = done.stdout.strip().split(" ", 1)
    assert order == "first in | first out | second in"
    assert slept == "0"  # (before: ~100 polls of 2 ms)
