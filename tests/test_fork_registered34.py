"""A fork waits for every bundle's SQLite work, the bundles opened while it waits too.

A fork takes each open bundle's lock (held around every SQLite call on its connection) so
that no other thread is inside SQLite when the child is made: SQLite's process-wide mutexes
(its allocator's, a file's lock state) would be copied held, and the child would wait for
ever on its first SQLite call. The bundles were listed once, before their locks were
waited for: one another thread opened meanwhile (a write-back's writer, opened right after
the import the fork waited for) was not waited for, and a child forked while that thread
was in SQLite on it hung (about one run in twenty of
`test_library_embed31.test_a_fork_while_a_thread_imports_warms_writer_leaves_a_child_that_ends`).
Here the other thread holds a bundle it opened after the fork began waiting, as SQLite work
holds it: the child must be made only after that work ended."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import ROOT

SCRIPT = """
import os, sys, threading, time
from warmcli.bundle.store import Bundle

path = sys.argv[1]
first = Bundle.open(path)  # open before the fork: its lock is listed at once
waiting, holding, ended = threading.Event(), threading.Event(), []

def gate(frame, event, arg):  # the fork has listed the bundles and waits for their locks
    if event == "c_call" and frame.f_code.co_name == "_before" and not waiting.is_set():
        if getattr(arg, "__name__", "") == "acquire":
            waiting.set()
            holding.wait(30)

def other():
    waiting.wait(30)
    late = Bundle.open(path)  # opened while the fork waits
    with late._lock:  # as around a SQLite call on its connection
        holding.set()
        time.sleep(1.0)
        ended.append(True)
    late.close()

threading.Thread(target=other).start()
sys.setprofile(gate)
pid = os.fork()
if pid == 0:
    os._exit(0 if ended else 3)  # made while the other thread's SQLite work went on: 3
sys.setprofile(None)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""


def test_a_fork_waits_for_a_bundle_opened_while_it_waited(tmp_path: Path) -> None:
    from warmcli.bundle.store import Bundle

    path = tmp_path / "b.warm"
    Bundle.create(path).close()
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"], (done.stdout, done.stderr)
