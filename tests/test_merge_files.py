"""The files around a merge and a write: OUT keeps its mode, owner and group (or the
merge is refused), nothing a killed or failed merge or create left stays behind, a
full disk is said to be one, and a file that is no bundle or a directory is one line.

All through the real CLI in subprocesses; the full disk is a real 1 MiB tmpfs (where
this user may mount one), and SQLite's own page limit for the message in-process.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_concurrency import WORKLOAD
from test_live_bundle import Paused, bundle_of

from warmcli.bundle.store import Bundle, BundleError

NOBODY = 65534


def one_error(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warm: error: "), lines
    assert "Traceback" not in proc.stderr and "Errno" not in lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def leftovers(bundle: Path) -> list[str]:
    return sorted(
        n for n in os.listdir(bundle.parent) if n.lstrip(".").startswith(bundle.name + ".")
    )


def test_merge_keeps_outs_mode_owner_and_group(warm: Warm, tmp_path: Path) -> None:
    bundle, other = bundle_of(warm, tmp_path, 0), bundle_of(warm, tmp_path, 1)
    bundle.chmod(0o444)
    assert warm("merge", bundle, other, "-o", bundle).returncode == 0
    assert bundle.stat().st_mode & 0o777 == 0o444
    if os.getuid() == 0:  # a group-owned 0440 setup: only root can make one for the test
        os.chown(bundle, 1234, 5678)
        bundle.chmod(0o440)
        assert warm("merge", bundle, other, "-o", bundle).returncode == 0
        st = bundle.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (1234, 5678, 0o440)


def _runs_as_nobody() -> bool:
    """Root, with setpriv, and this interpreter runs as `nobody` (one built with a shared
    libpython in root's own folder does not)."""
    if os.getuid() != 0 or not shutil.which("setpriv"):
        return False
    probe = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    return (
        subprocess.run([*probe, sys.executable, "-c", "pass"], capture_output=True).returncode == 0
    )


@pytest.mark.skipif(not _runs_as_nobody(), reason="needs root, and Python runnable as nobody")
def test_merge_is_refused_when_out_is_not_the_callers_to_write(warm: Warm, tmp_path: Path) -> None:
    shared = Path(tempfile.mkdtemp(prefix="warm-shared-"))  # pytest's are root's alone
    shared.chmod(0o777)
    try:
        refused_as_nobody(warm, tmp_path, shared)
    finally:
        shutil.rmtree(shared)


def refused_as_nobody(warm: Warm, tmp_path: Path, shared: Path) -> None:
    bundle, other = (shutil.copy(bundle_of(warm, tmp_path, w), shared) for w in (0, 1))
    bundle, other = Path(bundle), Path(other)
    env = dict(warm.env, WARM_HOME=str(shared / "home"))
    as_nobody = [
        "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
        sys.executable, "-m", "warmcli", "merge", bundle, other, "-o", bundle,
    ]  # fmt: skip
    for mode, needle in ((0o444, "not writable by you"), (0o666, "cannot keep its owner")):
        bundle.chmod(mode)
        before = digest(bundle)
        proc = subprocess.run(as_nobody, capture_output=True, text=True, env=env, cwd=ROOT)
        one_error(proc, needle, "nothing was merged")
        assert digest(bundle) == before and bundle.stat().st_uid == 0
        # refused before its lock is taken (trial57d), or, keeping its owner, once written
        assert leftovers(bundle) == ([] if mode == 0o444 else [f"{bundle.name}.lock"])


def test_a_killed_merge_leaves_nothing_after_the_next_write(warm: Warm, tmp_path: Path) -> None:
    bundle, other = bundle_of(warm, tmp_path, 0), bundle_of(warm, tmp_path, 1)
    target = "warmcli.ops.merge:signed_as"  # the merged file is written, not yet published
    killed = Paused(warm, tmp_path / "gate", target, "merge", bundle, other, "-o", bundle)
    killed.proc.send_signal(signal.SIGKILL)
    killed.proc.communicate()
    pid = killed.proc.pid
    assert f".{bundle.name}.{pid}.merge" in leftovers(bundle)
    assert warm("merge", bundle, other, "-o", bundle).returncode == 0
    assert leftovers(bundle) == [f"{bundle.name}.lock"]


def test_empty_and_foreign_files_and_a_directory_are_one_line(warm: Warm, tmp_path: Path) -> None:
    bundle = bundle_of(warm, tmp_path, 0)
    empty, foreign = tmp_path / "empty.warm", tmp_path / "foreign.db"
    empty.touch()
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    out = tmp_path / "out.warm"
    one_error(warm("merge", empty, bundle, "-o", out), "empty.warm", "an empty file")
    one_error(warm("merge", bundle, foreign, "-o", out), "foreign.db", "another application")
    one_error(warm("merge", bundle, "-o", tmp_path), "is a directory")
    assert not out.exists()


@contextlib.contextmanager
def small_disk(where: Path) -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (not root, or not allowed)")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(disk: Path) -> Path:
    filler = disk / "filler"
    with contextlib.suppress(OSError), open(filler, "wb", buffering=0) as fh:
        while True:
            fh.write(b"\0" * 4096)
    return filler


@pytest.mark.skipif(os.getuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_full_disk_says_so_and_leaves_the_bundle_and_nothing_else(
    warm: Warm, tmp_path: Path
) -> None:
    other = bundle_of(warm, tmp_path, 1)
    writer = tmp_path / "w2.py"
    writer.write_text(WORKLOAD.format(w=2))
    with small_disk(tmp_path / "disk") as disk:
        bundle = disk / "b.warm"
        shutil.copy(bundle_of(warm, tmp_path, 0), bundle)
        filler = fill(disk)
        before = digest(bundle)
        one_error(warm("run", writer, "--bundle", bundle), "the disk is full", "unchanged")
        one_error(warm("merge", bundle, other, "-o", bundle), "the disk is full", "unchanged")
        one_error(warm("run", writer, "--bundle", disk / "new.warm"), "the disk is full")
        assert digest(bundle) == before
        assert leftovers(bundle) == [f"{bundle.name}.lock"]
        assert leftovers(disk / "new.warm") == []  # a first run that made nothing: no lock
        filler.unlink()
        assert warm("verify", bundle).returncode == 0


def test_sqlites_full_error_is_named_a_full_disk(tmp_path: Path) -> None:
    """The message for a real SQLITE_FULL (SQLite's page limit reached), in-process."""
    with Bundle.create(tmp_path / "b.warm") as bundle:
        pages = bundle._conn.execute("PRAGMA page_count").fetchone()[0]
        bundle._conn.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(BundleError, match="disk is full: nothing was written, the bundle"):
            bundle.put(fingerprints=[("x", "device", {"pad": "x" * 100_000})])
        assert bundle.fingerprints() == []


def _corrupt_a_blob(path: Path) -> str:
    """Flip one byte of one blob of `path` (its sha256 kept): the blob's sha256."""
    conn = sqlite3.connect(path)
    sha, data = conn.execute("SELECT sha256, data FROM blobs ORDER BY sha256 LIMIT 1").fetchone()
    spoiled = bytearray(data)
    spoiled[len(spoiled) // 2] ^= 1
    conn.execute("UPDATE blobs SET data = ? WHERE sha256 = ?", (bytes(spoiled), sha))
    conn.commit()
    conn.close()
    return str(sha)


def test_a_corrupt_copy_is_merged_from_an_input_holding_a_good_one(
    warm: Warm, tmp_path: Path
) -> None:
    good = bundle_of(warm, tmp_path, 1)
    bad = tmp_path / "bad.warm"
    shutil.copy(good, bad)
    sha = _corrupt_a_blob(bad)
    out = tmp_path / "merged.warm"
    doc = warm.json("merge", bad, good, "-o", out)  # the corrupt copy's input first
    (said,) = doc["mended"]
    assert f"blob {sha[:16]} does not match its sha256" in said and f"copied from {good}" in said
    with Bundle.open(out) as merged, Bundle.open(good) as source:
        assert merged.blob(sha) == source.blob(sha)  # checked against its sha256
        assert {k.key for k in merged.kernels()} == {k.key for k in source.kernels()}
    assert warm("verify", out).returncode == 0
    only_bad = warm("merge", bad, "-o", tmp_path / "alone.warm")  # no good copy: refused
    one_error(only_bad, f"blob {sha[:16]} does not match its sha256")
    assert not (tmp_path / "alone.warm").exists()
