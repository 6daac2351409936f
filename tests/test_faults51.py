"""Faults a campaign found (stop 51): real kills (SIGKILL, SIGINT, SIGTERM at random moments,
50-200 trials each) of `warm run` into an existing bundle, `warm merge -o` it, `warm clean`,
`warm sign`, a production write-back, and two of them at once; a full tmpfs under the bundle,
warm's home and TMPDIR; `ulimit -f`; the bundle's mount remounted read-only mid-run. Each kept
every entry the bundle held, bit for bit, in one line and a non-zero exit, but:

- a disk with no free inode (a tmpfs's `nr_inodes`, a small ext4 full of small files) where the
  bundle's `.lock` is already there: SQLite cannot make the journal (`CANTOPEN`, no errno), and
  `warm run`, `sign`, `clean` and a write-back said `SQLite could not open the bundle or its
  journal (too many open files?)`: a wrong lead, where every other full disk says `the disk is
  full: nothing was written, the bundle is unchanged`. It says that now.
- there, `warm merge B ... -o B` failed on its temporary file's write lock, naming that file
  (`.B.PID.merge.lock: No space left on device`) and not that B was unchanged. A lock file the
  disk has no room for is a full disk now: `the disk is full: nothing was merged, B is
  unchanged`.
- a SIGINT or SIGTERM while `warm run`, `clean`, `sign` or `merge` migrated a large format-1
  bundle (its rows repacked by warm's SQL functions) was one line, exit 2, `corrupt bundle
  (user-defined function raised exception)`: SQLite keeps no more of an exception raised in a
  function it calls, so the interrupt was read as a corrupt bundle (3 of 30 random trials;
  nothing was lost: rolled back). The migration converts its rows in Python now, no SQL
  function of warm's: `warm: interrupted`, exit 130.

The mounts are made in a mount namespace of the test's own (`in_private_mount`), gone after it,
and the test is skipped where nothing can be mounted.
"""

from __future__ import annotations

import hashlib
import shutil
import signal
import sqlite3
import sys
from pathlib import Path

import pytest
from conftest import Warm
from full_disk import in_private_mount, one_line
from test_compact_tunes import _format1, _tune

from warmcli.bundle.store import Bundle

needs_unshare = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare")


def _on_a_disk_of_no_inode(
    warm: Warm, good: Path, tmp_path: Path, command: str, left: str
) -> tuple[str, str, str]:
    """`command` (its `{bundle}` a copy of `good`, its `.lock` beside it) on a tmpfs of 16
    inodes filled until none is left: its one line, the bundle's sha256 after, and how many
    of the tmpfs' names hold `left`."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    bundle = mnt / "b.warm"
    script = (
        f"mount -t tmpfs -o size=4m,nr_inodes=16 tmpfs {mnt} || exit 99; "
        f"cp {good} {bundle} && : > {bundle}.lock || exit 98; "
        f"i=0; while touch {mnt}/f$i 2>/dev/null; do i=$((i+1)); done; "
        f"{sys.executable} -m warmcli {command.format(bundle=bundle)}; rc=$?; "
        f"sha256sum {bundle} >&2; ls -a {mnt} | grep -c {left} >&2; exit $rc"
    )
    proc = in_private_mount(script, warm.env, timeout=120)
    *said, digest, count = proc.stderr.strip().splitlines()
    proc.stderr = "\n".join(said)
    return one_line(proc), digest.split()[0], count


@needs_unshare
def test_a_disk_with_no_free_inode_for_the_journal_is_said_full(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A tmpfs of 16 inodes, the bundle and its `.lock` on it, then files made until none is
    left: `warm clean --older-than 0d` (which must write) said `too many open files?`. It
    says the disk is full, nothing written, and the bundle is byte for byte as it was."""
    warm, good = made
    before = hashlib.sha256(good.read_bytes()).hexdigest()
    line, digest, journals = _on_a_disk_of_no_inode(
        warm, good, tmp_path, "clean {bundle} --older-than 0d", "journal"
    )
    assert "the disk is full (no room for its journal): nothing was written" in line, line
    assert "too many open files" not in line, line
    assert digest == before and journals == "0", (digest, journals)


@needs_unshare
def test_a_merge_into_a_bundle_on_a_disk_with_no_free_inode_says_nothing_was_merged(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """`warm merge B B2 -o B` on a disk with no inode left (B's `.lock` already there) failed
    on its temporary file's lock, naming that file and no more: `.B.PID.merge: cannot take the
    write lock .B.PID.merge.lock: No space left on device`. It says the disk is full, nothing
    was merged and B is unchanged, as a full disk of blocks says, and B is byte for byte as
    it was."""
    warm, good = made
    before = hashlib.sha256(good.read_bytes()).hexdigest()
    line, digest, left = _on_a_disk_of_no_inode(
        warm, good, tmp_path, f"merge {{bundle}} {good} -o {{bundle}}", "merge"
    )
    bundle = tmp_path / "mnt" / "b.warm"
    assert f"the disk is full: nothing was merged, {bundle} is unchanged" in line, line
    assert ".merge" not in line, line
    assert digest == before and left == "0", (digest, left)


def test_an_interrupt_while_a_format_1_bundle_migrates_is_an_interrupt_not_corrupt(
    tmp_path: Path,
) -> None:
    """A format-1 bundle of 20,000 tunes (its rows copied in SQL from one warm wrote), opened
    for write: the migration repacks every row in warm's SQL function. A KeyboardInterrupt
    raised there (as warm's SIGINT and SIGTERM handlers raise it; here SIGPROF's, after 0.1 s
    of this process's CPU, about a sixth of the migration) came out as `BundleError: corrupt
    bundle (user-defined function raised exception)`. It is the KeyboardInterrupt now, and the
    bundle is left in format 1 with every row."""
    path = tmp_path / "old.warm"
    _format1(path, [_tune(0)])
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 19999) "
        "INSERT INTO tunes SELECT lower(hex(randomblob(32))), operation, shape_key || i, "
        "device, checksum, status, pick, candidates, seconds, measured_at, updated "
        "FROM tunes, n"
    )
    conn.close()

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGPROF, interrupt)
    try:
        signal.setitimer(signal.ITIMER_PROF, 0.1)
        with pytest.raises(KeyboardInterrupt), Bundle.open(path, write=True):
            pass
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, before)
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM tunes").fetchone()[0] == 20_000
    conn.close()
    assert not Path(f"{path}-journal").exists()
