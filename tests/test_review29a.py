"""Review of fleet trial 29 (`warmcli.bundle.replacing`, `warmcli.bundle.soundness`):
what a file put in place of a bundle must never inherit from the old one.

- A bundle someone switched to WAL mode, its writer killed after a commit, leaves a
  `-wal` beside it. SQLite plays a `-wal` into whichever file bears the name when it is
  next opened, whatever that file's header says: `warm merge -o OUT --force` and `warm
  pull URL PATH` put a new file there and its next open found it `corrupt` (the
  old file's pages over the new one's), as the crash journal did before trial 29.
- A crash journal may name a super-journal, a file SQLite deletes once the journal is
  played. Whoever may write beside a bundle could have any file of the user's deleted
  by `warm stats` (any open), `warm run`, and, since trial 29, `warm merge -o OUT` and
  `warm pull`, which play OUT's journal first: such a journal, never one of warm's, is
  refused unplayed (removed unplayed where a file is put in its bundle's place).
"""

from __future__ import annotations

import os
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_fleet_trial29 import killed_writing, old_and_new, replaced_soundly
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
    source, target = old_and_new(store, built, tmp_path)
    killed_writing(target, _KILLED_AFTER_WAL_COMMIT, "-wal")
    env = warm.with_env(WARM_HOME=str(tmp_path / "home"))
    replaced_soundly(env, command, f"{base}/b.warm", source, target, "-wal")


_JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")


def _hostile_journal(bundle: Path, victim: Path) -> None:
    """A hot journal beside `bundle` that names `victim` as its super-journal (what only a
    transaction over several attached databases writes): SQLite's rollback of it ends by
    deleting `victim`, wherever it is, when no journal points back to it."""
    name = os.fsencode(victim)
    header = (_JOURNAL_MAGIC + (0).to_bytes(4, "big") * 2 + (19).to_bytes(4, "big")).ljust(
        512, b"\0"
    )
    tail = (1 << 16).to_bytes(4, "big") + name + len(name).to_bytes(4, "big")
    tail += sum(name).to_bytes(4, "big") + _JOURNAL_MAGIC
    Path(f"{bundle}-journal").write_bytes(header + tail)


@pytest.mark.parametrize("command", ["stats", "run", "merge", "pull"])
def test_a_journal_that_names_another_file_never_has_it_deleted(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
    command: str,
) -> None:
    """Whoever may write beside a bundle (a shared folder) could make any warm command
    that opened it, or put a file in its place, delete a file of the user's choosing:
    `warm stats` played the journal and SQLite removed the file it named."""
    store, base, _ = http_store
    source, target = old_and_new(store, built, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's data\n")
    _hostile_journal(target, victim)
    env = warm.with_env(WARM_HOME=str(tmp_path / "home"))
    if command == "stats":
        proc = env("stats", target)
    elif command == "run":
        proc = env("run", ROOT / "examples" / "matmul_host.py", "-b", target, "-q")
    elif command == "merge":
        proc = env("merge", source, "-o", target, "--force")
    else:
        proc = env("pull", f"{base}/b.warm", target)
    assert victim.read_text() == "the user's data\n", proc.stdout + proc.stderr
    if command in ("stats", "run"):  # refused, one line, the bundle as it was
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "journal" in proc.stderr, proc.stderr
        assert target.read_bytes() == built[1]
    else:  # the old file's journal is removed unplayed; the new file is whole
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert env("verify", target).returncode == 0
        assert not os.path.lexists(f"{target}-journal")
