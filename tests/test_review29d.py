"""Review 29d: files beside a bundle, and how warm replaces or uploads one.

- A migration (the first open for write of an older format) writes a journal like any
  write: it holds the write lock, so a merge publishing over the bundle meanwhile waits
  for it and never removes the journal of that live write (its commit failed: 'disk I/O
  error', said of a sound bundle).
- A push whose temporary copy the disk refuses names the folder the copy was made in
  and TMPDIR, which chooses it (a full /tmp was said as a bare 'No space left').
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from http.server import ThreadingHTTPServer
from pathlib import Path

from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_fleet_trial29 import _limited
from test_format3 import _format2, _tune
from test_live_bundle import Paused, settle
from test_remote import Store, built, http_store  # noqa: F401  (fixtures)

from warmcli.bundle.file import FORMAT_VERSION
from warmcli.bundle.store import Bundle

MID_MIGRATION = "warmcli.bundle.migrate:statements"  # its transaction begun, a journal written


def _version(path: Path) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def test_a_merge_waits_for_a_migration_and_never_removes_its_journal(
    warm: Warm, tmp_path: Path
) -> None:
    out, source = tmp_path / "out.warm", tmp_path / "a.warm"
    _format2(out, [_tune(0), _tune(1)])
    with Bundle.create(source) as bundle:
        bundle.put(tunes=[_tune(2)])
    migrating = Paused(warm, tmp_path / "gate", MID_MIGRATION, "clean", out)
    assert Path(f"{out}-journal").exists()  # the migration's live write
    merge = subprocess.Popen(
        [sys.executable, "-m", "warmcli", "merge", source, "-o", out, "--force"],
        env=warm.env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        settle(merge, 3)  # a merge that does not wait for the migration publishes now
        cleaned = migrating.go()
        merged_out, merged_err = merge.communicate(timeout=120)
    finally:
        for proc in (merge, migrating.proc):
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
    assert merge.returncode == 0, merged_out + merged_err
    assert warm("verify", out).returncode == 0
    assert _version(out) == FORMAT_VERSION
    with Bundle.open(out) as bundle:
        assert bundle.tune(_tune(2).key) == _tune(2)


def test_a_push_whose_temporary_copy_the_disk_refuses_names_the_folder_and_tmpdir(
    warm: Warm,
    tmp_path: Path,
    built: tuple[bytes, bytes],  # noqa: F811
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    _, base, _ = http_store
    bundle, scratch = tmp_path / "b.warm", tmp_path / "scratch"
    bundle.write_bytes(built[0])
    scratch.mkdir()
    env = dict(warm.env, TMPDIR=str(scratch))
    push = [sys.executable, "-m", "warmcli", "push", bundle, f"{base}/b.warm"]
    limit = len(built[0]) // 2  # as a full disk: the copy cannot be written whole
    proc = subprocess.run(
        push, capture_output=True, text=True, env=env, cwd=ROOT, preexec_fn=lambda: _limited(limit)
    )
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"its temporary copy in {scratch} failed (File too large" in proc.stderr, proc.stderr
    assert "TMPDIR" in proc.stderr, proc.stderr
    assert not list(scratch.iterdir())  # the anonymous copy left nothing
