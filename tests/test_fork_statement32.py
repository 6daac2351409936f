"""A fork while another thread streams a bundle's rows: the child may write that bundle.

A stress run (threads switching `use_bundle` between bundles they write back, the main
thread forking children that write back too) left 1 to 2 children in 3,000 waiting for
ever in their write-back's COMMIT, with no other process holding any lock on the file:
SQLite's per-process record of the file's locks, copied from the parent, said another
connection of the child's (the parent's, inherited) held a shared lock. It did, in the
parent: a listing (`Bundle._iter`, which the runtime's miss explanation reads through)
ran its statement's first step under the bundle's lock, then let go of the lock before
fetching, the statement still active; a fork in that gap copied the lock as held, and no
thread in the child ever ends that statement. Real processes (`os.fork`), a real bundle
made by the real CLI, each child under a timeout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

# Thread A lists the bundle's kernels; it is held (by a trace) at the first line of the
# listing after its statement ran and the bundle's lock was let go; the main thread forks
# then, and the child writes the bundle through its own connection, as a write-back would.
FORK_DURING_LISTING = r"""
import os, sqlite3, sys, threading
from warmcli.bundle.store import Bundle

path = sys.argv[1]
bundle = Bundle.open(path)
paused, go = threading.Event(), threading.Event()

def gate(frame, event, arg):
    if event == "call" and frame.f_code.co_name == "_iter":
        def lines(frame, event, arg):
            if (event == "line" and "cursor" in frame.f_locals and not paused.is_set()
                    and not bundle._lock._is_owned()):
                paused.set()
                go.wait(30)
            return lines
        return lines
    return None

def listing():
    sys.settrace(gate)
    list(bundle.each_kernel())

thread = threading.Thread(target=listing)
thread.start()
if not paused.wait(30):
    sys.exit("the listing never reached the gate")
pid = os.fork()
if pid == 0:
    try:
        conn = sqlite3.connect(path, timeout=3, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("UPDATE manifest SET value = value WHERE key = 'updated'")
        conn.execute("COMMIT")
        os._exit(0)
    except sqlite3.OperationalError as exc:
        os.write(2, f"child: {exc}\n".encode())
        os._exit(1)
status = os.waitpid(pid, 0)[1]
go.set()
thread.join()
print(os.waitstatus_to_exitcode(status))
"""


def test_a_child_forked_while_a_thread_lists_the_bundle_can_write_it(
    warm: Warm, tmp_path: Path
) -> None:
    bundle = tmp_path / "b.warm"
    warm("run", "examples/matmul_host.py", "-b", str(bundle))
    script = tmp_path / "fork_listing.py"
    script.write_text(FORK_DURING_LISTING)
    done = subprocess.run(
        [sys.executable, str(script), str(bundle)],
        capture_output=True,
        text=True,
        timeout=120,
        env=warm.env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "0\n", f"the child could not write the bundle: {done.stderr}"
