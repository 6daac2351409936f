"""Review 42g of signals42 (every bundle connection a `Waiting` one: SQLite's busy timeout 50 ms,
`execute` trying again until LOCK_WAIT_SECONDS). Real processes: a raw sqlite3 writer holding
the exclusive lock, a warm process reading the bundle, real SQLite files, the real C compiler."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from counted_calls import counted
from test_signals42 import HOLD, _env, warmed_bundle, warmed_once  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable


# A warm process with the bundle open, its blob's row found, which reads the blob a chunk at a
# time (`warm verify`'s, `warm merge`'s, `warm check`'s read: SQLite's incremental blob handle)
# once told on stdin, while another process holds the lock.
READ_BLOB = """
import sys
import time
from warmcli.bundle.blobs import digest, head
from warmcli.bundle.store import Bundle
b = Bundle.open(sys.argv[1])
sha, rowid = b._one("SELECT sha256, rowid FROM blobs")
print("ready", flush=True)
sys.stdin.readline()
print(digest(b, rowid) == sha, head(b, sha, 4)[1] > 0, flush=True)
"""


def test_a_blob_read_chunk_by_chunk_waits_for_a_writers_lock(tmp_path: Path, warmed: Path) -> None:
    # Before: SQLite's busy timeout (50 ms since signals42) was the blob handle's only wait:
    # a writer holding the lock longer made the read fail at once, 'corrupt bundle (database
    # is locked)' (warm verify then names a sound bundle corrupt); a statement waits 60 s.
    reader = subprocess.Popen(
        [PY, "-c", READ_BLOB, str(warmed)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tmp_path),
    )
    assert reader.stdout is not None and reader.stdout.readline() == "ready\n"
    hold = [PY, "-c", HOLD, str(warmed), "1.0"]
    holder = subprocess.Popen(hold, stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    out, err = reader.communicate("go\n", timeout=30)
    holder.wait(timeout=30)
    assert (reader.returncode, out, err) == (0, "True True\n", "")


def test_a_conflict_within_the_connection_is_raised_at_once_not_waited_for() -> None:
    # Before: `busy` took any error whose words say "locked" for another process's lock, so a
    # conflict within the connection itself (SQLITE_LOCKED: a table dropped while a statement
    # still reads it), which no wait ends, was tried again for the whole wait (60 s), then
    # raised; SQLite's own execute raised it at once.
    import _sqlite3

    from warmcli.bundle.waiting import SLICE_SECONDS, Waiting

    conn = _sqlite3.connect(
        ":memory:", isolation_level=None, timeout=SLICE_SECONDS, factory=Waiting
    )
    conn.wait_seconds = 5.0
    conn.execute("CREATE TABLE t(x)")
    conn.execute("INSERT INTO t VALUES (1), (2)")
    reading = conn.execute("SELECT x FROM t")
    assert reading.fetchone() == (1,)
    with counted() as calls, pytest.raises(_sqlite3.OperationalError, match="table is locked"):
        conn.execute("DROP TABLE t")
    # counted, not timed: its error judged once (`busy`), never tried again nor slept on
    assert (calls["busy"], calls["sleep"]) == (1, 0), calls
