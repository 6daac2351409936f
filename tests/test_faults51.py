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

The mounts are made in a mount namespace of the test's own (`in_private_mount`), gone after it,
and the test is skipped where nothing can be mounted.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

import pytest
from conftest import Warm
from full_disk import in_private_mount, one_line

needs_unshare = pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare")


@needs_unshare
def test_a_disk_with_no_free_inode_for_the_journal_is_said_full(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A tmpfs of 16 inodes, the bundle and its `.lock` on it, then files made until none is
    left: `warm clean --older-than 0d` (which must write) said `too many open files?`. It
    says the disk is full, nothing written, and the bundle is byte for byte as it was."""
    warm, good = made
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    bundle = mnt / "b.warm"
    before = hashlib.sha256(good.read_bytes()).hexdigest()
    clean = f"{sys.executable} -m warmcli clean {bundle} --older-than 0d"
    script = (
        f"mount -t tmpfs -o size=4m,nr_inodes=16 tmpfs {mnt} || exit 99; "
        f"cp {good} {bundle} && : > {bundle}.lock || exit 98; "
        f"i=0; while touch {mnt}/f$i 2>/dev/null; do i=$((i+1)); done; "
        f"{clean}; rc=$?; sha256sum {bundle} >&2; ls -a {mnt} | grep -c journal >&2; exit $rc"
    )
    proc = in_private_mount(script, warm.env, timeout=120)
    *said, digest, journals = proc.stderr.strip().splitlines()
    proc.stderr = "\n".join(said)
    line = one_line(proc)
    assert "the disk is full (no room for its journal): nothing was written" in line, line
    assert "too many open files" not in line, line
    assert digest.split()[0] == before and journals == "0", (digest, journals)


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
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    bundle = mnt / "b.warm"
    before = hashlib.sha256(good.read_bytes()).hexdigest()
    merge = f"{sys.executable} -m warmcli merge {bundle} {good} -o {bundle}"
    script = (
        f"mount -t tmpfs -o size=4m,nr_inodes=16 tmpfs {mnt} || exit 99; "
        f"cp {good} {bundle} && : > {bundle}.lock || exit 98; "
        f"i=0; while touch {mnt}/f$i 2>/dev/null; do i=$((i+1)); done; "
        f"{merge}; rc=$?; sha256sum {bundle} >&2; ls -a {mnt} | grep -c merge >&2; exit $rc"
    )
    proc = in_private_mount(script, warm.env, timeout=120)
    *said, digest, left = proc.stderr.strip().splitlines()
    proc.stderr = "\n".join(said)
    line = one_line(proc)
    assert f"the disk is full: nothing was merged, {bundle} is unchanged" in line, line
    assert ".merge" not in line, line
    assert digest.split()[0] == before and left == "0", (digest, left)
