"""Review of fleet trial 29 (`warmcli.bundle.replacing`, `warmcli.bundle.soundness`):
what a file put in place of a bundle must never inherit from the old one.

- A bundle someone switched to WAL mode, its writer killed after a commit, leaves a
  `-wal` beside it. SQLite plays a `-wal` into whichever file bears the name when it is
  next opened, whatever that file's header says: `warm merge -o OUT --force` and `warm
  pull URL PATH` put a new file there and its next open found it `corrupt` (the
  old file's pages over the new one's), as the crash journal did before trial 29.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from test_remote import Store, built, http_store  # noqa: F401  (fixtures)

_KILLED_AFTER_WAL_COMMIT = """
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
assert conn.execute("PRAGMA journal_mode = WAL").fetchone()[0] == "wal"
conn.execute("BEGIN IMMEDIATE")
conn.execute("UPDATE blobs SET data = zeroblob(length(data))")
conn.execute("UPDATE kernels SET entry = entry || 'x'")
conn.execute("COMMIT")  # in the -wal only: never checkpointed
os.kill(os.getpid(), 9)
"""


@pytest.mark.parametrize("command", ["pull", "merge"])
def test_a_bundle_put_in_place_of_a_wal_one_is_not_played_the_old_wal(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    command: str,
) -> None:
    store, base, _ = http_store
    store.files["/b.warm"] = built[0]
    source = tmp_path / "source.warm"
    source.write_bytes(built[0])
    target = tmp_path / "t.warm"
    target.write_bytes(built[1])
    killed = subprocess.run([sys.executable, "-c", _KILLED_AFTER_WAL_COMMIT, target], cwd=ROOT)
    assert killed.returncode == -signal.SIGKILL
    assert os.path.getsize(f"{target}-wal") > 0
    env = Warm(dict(warm.env, WARM_HOME=str(tmp_path / "home")))
    if command == "pull":
        proc = env("pull", f"{base}/b.warm", target)
    else:
        proc = env("merge", source, "-o", target, "--force")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verified = env("verify", target)
    assert verified.returncode == 0 and "sound" in verified.stdout, (
        verified.stdout + verified.stderr
    )
    assert len(env.json("stats", target)["tunes"]) == 3
    assert not os.path.exists(f"{target}-wal")
