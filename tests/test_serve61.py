"""serve61: what a served process may not trade for a cheaper first launch (issue 16).

A served kernel's row is read by SQLite statements each run outside a transaction: every one
takes and drops the bundle's shared lock and checks its change counter (~10 system calls, ~18
µs here), which the serving cost's levers would skip: one read transaction held across the
first launches, or the file opened `immutable=1` (no lock, no change counter read). Either
changes what a process serves: a transaction held keeps a writer's commit waiting (the README
promises `warm run`, `warm clean` and a copy over the bundle work while processes serve it),
and an immutable file's pages cached before a writer's commit are served after it. These
tests pin both: between two launches a served process holds no lock (a writer that waits for
none commits), and a kernel row a writer removed after the process read the page it was on
is not served from that page (the process builds it), while every other kernel still is.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, Warm

from bench import generated

KERNELS = 50
BEFORE = 27  # launched before the writer: the rows prefetched then reach row 35 (`lookup`)
REMOVED = 36  # the next row, not prefetched, on the page the process read row 35 from

# A production process over the bundle: `BEFORE` kernels launched, then it waits for a line
# on stdin (a writer commits meanwhile), launches the rest and prints what it loaded and built.
SERVER = """
import json, sys
from warmcli import production
production.use_bundle(sys.argv[2])
sys.path.insert(0, sys.argv[1])
import work
rt = production.runtime("host")
buffer = rt.buffer(4, "int32")
before = int(sys.argv[3])
for kernel in work.KERNELS[:before]:
    rt.launch(kernel, buffer, 1)
rt.synchronize()
print("ready", flush=True)
sys.stdin.readline()
for kernel in work.KERNELS[before:]:
    rt.launch(kernel, buffer, 1)
rt.synchronize()
from warmcli.execution.process_mode import default_collector
total = default_collector().reader().total().compilation
print(json.dumps({"loaded": total.loaded, "compiled": total.compiled}), flush=True)
"""


def _remove_row(bundle: Path, label: str) -> None:
    """`label`'s kernel row deleted by a writer that waits for no lock (busy timeout 0):
    SQLITE_BUSY ("database is locked") if any process holds the bundle's shared lock."""
    with contextlib.closing(sqlite3.connect(bundle, timeout=0, isolation_level=None)) as conn:
        conn.execute("BEGIN IMMEDIATE")
        removed = conn.execute("DELETE FROM kernels WHERE label = ?", (label,)).rowcount
        conn.execute("COMMIT")
    assert removed == 1, label


def test_a_served_process_holds_no_lock_between_launches_nor_serves_a_removed_row(
    warm: Warm, tmp_path: Path
) -> None:
    generated.write(tmp_path / "work.py", KERNELS)
    bundle = tmp_path / "b.warm"
    done = warm("run", tmp_path / "work.py", "--bundle", bundle, "-q")
    assert done.returncode == 0, done.stderr
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(tmp_path), str(bundle), str(BEFORE)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=warm.env,
        cwd=ROOT,
    )
    try:
        assert server.stdout is not None and server.stdin is not None
        assert server.stdout.readline() == "ready\n", server.stderr and server.stderr.read()
        _remove_row(bundle, f"touch[V={REMOVED}]")  # raises "database is locked" if held
        out, err = server.communicate("go\n", timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert server.returncode == 0, err
    counts = json.loads(out.splitlines()[-1])
    # every kernel but the removed one served; that one built here (none served stale)
    assert counts == {"loaded": KERNELS - 1, "compiled": 1}, (counts, err)
