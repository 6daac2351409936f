"""What ships beside a bundle from elsewhere (stop 36): a hot `-journal` planted beside a
bundle a process already has open, whose pages rewrite the bundle's schema when rolled back.

A new process rolls such a journal back before it checks the schema, and refuses the
bundle; a process that had the bundle open (a worker, a writer) checked the schema once, at
its open, and then read (or wrote) through whatever schema the rollback left: a view of the
bundle's answered its reads, a trigger of the bundle's ran at its writes. Each test is a
real process over a real bundle (made by `warm run` with the real cc) and a real journal
(an SQLite transaction's, copied aside while it was open).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import struct
import subprocess
import sys
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path

from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_remote import Store, http_store  # noqa: F401  (a fixture)

# A process with the bundle `argv[1]` open (`argv[2]`: "write" to open it for write) reads
# it, then the journal `argv[3]` is planted beside it, then it reads (or writes) again.
LIVE = """
import shutil, sys
from warmcli.bundle.store import Bundle
from warmcli.errors import BundleError
b = Bundle.open(sys.argv[1], write=sys.argv[2] == "write")
kernels = b.kernels()
print(len(kernels), len(b.tunes()))
shutil.copyfile(sys.argv[3], sys.argv[1] + "-journal")
try:
    if sys.argv[2] == "write":
        b.touch({kernels[0].key: 1.0})
    print(len(b.kernels()), len(b.tunes()))
except BundleError as exc:
    print("error:", exc)
"""


def hostile_journal(good: Path, out: Path, *statements: str) -> Path:
    """A hot journal (at `out`) whose rollback turns a copy of `good` into `good` with
    `statements` run: their pages (the schema's) as the journal restores them."""
    copy = out.with_name(out.name + ".db")
    shutil.copyfile(good, copy)
    conn = sqlite3.connect(copy, isolation_level=None)
    conn.execute("PRAGMA writable_schema = ON")
    for statement in statements:
        conn.execute(statement)
    conn.close()
    conn = sqlite3.connect(copy, isolation_level=None)
    conn.execute("PRAGMA synchronous = OFF")  # its record count says "to the end": played
    conn.execute("BEGIN")
    conn.execute("CREATE TABLE zz (x)")  # page 1, the schema's, journaled as it was
    shutil.copyfile(f"{copy}-journal", out)
    conn.execute("ROLLBACK")
    conn.close()
    # page 1 said to be at `good`'s change counter, as a journal crafted to pass for `good`'s
    # would be (no checksum covers those bytes): else it is refused as another file's
    journal = bytearray(out.read_bytes())
    first = int.from_bytes(journal[20:24], "big")  # the sector size: where records start
    assert int.from_bytes(journal[first : first + 4], "big") == 1  # page 1's image
    journal[first + 4 + 24 : first + 4 + 28] = good.read_bytes()[24:28]
    out.write_bytes(journal)
    return out


def view_journal(good: Path, out: Path) -> Path:
    """A hot journal (at `out`) whose rollback makes `good`'s `kernels` a view of none."""
    view = "CREATE VIEW kernels AS SELECT * FROM k0 WHERE 0"
    return hostile_journal(good, out, "ALTER TABLE kernels RENAME TO k0", view)


def wal_journal(good: Path, out: Path) -> Path:
    """A hot journal (at `out`) whose rollback leaves `good`'s copy as it was, but for its
    header's file format bytes: write-ahead-log mode (no journal warm writes restores it)."""
    journal = bytearray(hostile_journal(good, out).read_bytes())
    first = int.from_bytes(journal[20:24], "big")  # the sector size: where records start
    assert int.from_bytes(journal[first : first + 4], "big") == 1  # page 1's image
    journal[first + 4 + 18 : first + 4 + 20] = b"\2\2"  # (bytes no checksum covers)
    out.write_bytes(journal)
    return out


JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")


def journal_naming(bundle: Path, other: Path, out: Path) -> Path:
    """A hot journal (at `out`) for `bundle` that replays no page and names `other` as its
    super-journal, as SQLite writes one for a transaction over attached databases."""
    pages = bundle.stat().st_size // 16384
    header = JOURNAL_MAGIC + struct.pack(">IIIII", 0, 0, pages, 512, 16384)
    name = os.fsencode(other)
    record = struct.pack(">I", 0) + name + struct.pack(">II", len(name), sum(name))
    out.write_bytes(header.ljust(512, b"\0") + record + JOURNAL_MAGIC)
    return out


def _user_file_as_shm(bundle: Path) -> Path:
    """A file of the user's, hard-linked as the bundle's `-shm` (shipped beside it)."""
    precious = bundle.with_name("precious.txt")
    precious.write_text("the user's data\n")
    os.link(precious, f"{bundle}-shm")
    return precious


def _live(warm: Warm, bundle: Path, mode: str, journal: Path) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", LIVE, str(bundle), mode, str(journal)],
        capture_output=True,
        text=True,
        env=warm.env,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stdout.splitlines()


def test_a_view_a_journal_planted_beside_an_open_bundle_restores_never_answers_a_read(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    # A worker with the bundle open read 0 kernels after the journal was rolled back (its
    # next read did it, `_retrying`): `kernels` was then the bundle's view (of none), which
    # the worker's reads ran; a new process refused that schema.
    bundle = host_bundle(tmp_path / "b.warm")
    lines = _live(warm, bundle, "read", view_journal(bundle, tmp_path / "view.journal"))
    assert lines[0] == "6 3"
    assert lines[1].startswith("error: ") and "not warm's" in lines[1], lines
    assert len(lines) == 2
    refused = warm("stats", bundle)
    assert refused.returncode == 2 and "not warm's" in refused.stderr


def test_a_trigger_a_journal_planted_beside_an_open_bundle_restores_never_runs_at_a_write(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    # A writer with the bundle open (production's write-back, a merge) wrote through the
    # bundle's trigger once its write rolled the journal back: the trigger deleted every tune.
    bundle = host_bundle(tmp_path / "b.warm")
    trigger = "CREATE TRIGGER t AFTER UPDATE ON kernels BEGIN DELETE FROM tunes; END"
    journal = hostile_journal(bundle, tmp_path / "trigger.journal", trigger)
    lines = _live(warm, bundle, "write", journal)
    assert lines[0] == "6 3"
    assert lines[1].startswith("error: ") and "not warm's" in lines[1], lines
    with sqlite3.connect(f"file:{bundle}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT count(*) FROM tunes").fetchone() == (3,)  # none deleted


def test_a_journal_restoring_wal_mode_never_has_sqlite_rewrite_a_user_file_linked_as_shm(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    # `warm stats` rolled the journal back (page 1 then said WAL), so SQLite opened the
    # `-shm` beside it, a hard link to a user's file, and rewrote it as its WAL index
    # (32768 bytes of binary); the `-shm` is checked only when the header says WAL at open.
    bundle = host_bundle(tmp_path / "b.warm")
    precious = _user_file_as_shm(bundle)
    shutil.copyfile(wal_journal(bundle, tmp_path / "wal.journal"), f"{bundle}-journal")
    proc = warm("stats", bundle)
    assert precious.read_bytes() == b"the user's data\n"
    assert proc.returncode == 2, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "b.warm-shm is a hard link" in lines[0], proc.stderr


def test_a_journal_restoring_wal_mode_beside_an_open_bundle_rewrites_no_user_file(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    # A reader's next read (`_retrying`'s rollback) and a writer's next write (SQLite's own
    # rollback) each rewrote the user's file hard-linked as the bundle's `-shm`.
    for mode in ("read", "write"):
        bundle = host_bundle(tmp_path / f"{mode}.warm")
        precious = _user_file_as_shm(bundle)
        lines = _live(warm, bundle, mode, wal_journal(bundle, tmp_path / f"{mode}.journal"))
        assert precious.read_bytes() == b"the user's data\n", mode
        assert lines[0] == "6 3"
        assert lines[1].startswith("error: ") and "is a hard link" in lines[1], (mode, lines)
        precious.unlink()


def test_a_journal_naming_a_super_journal_beside_a_bundle_a_writer_has_open_deletes_nothing(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    # A writer's next write had SQLite roll the journal back, then delete the file it named.
    bundle = host_bundle(tmp_path / "b.warm")
    precious = tmp_path / "precious.txt"
    precious.write_text("the user's data\n")
    journal = journal_naming(bundle, precious, tmp_path / "super.journal")
    lines = _live(warm, bundle, "write", journal)
    assert precious.read_bytes() == b"the user's data\n"
    assert lines[0] == "6 3"
    assert lines[1].startswith("error: ") and "names another file" in lines[1], lines


def test_a_journal_hard_linked_to_a_user_file_is_never_written(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    # `warm clean --max-size 1K` wrote its transaction's journal into the `-journal` beside
    # the bundle, a hard link to a user's file whose first byte is NUL (so SQLite found no
    # hot journal in it): the user's file became 279 KB of the bundle's pages.
    bundle = host_bundle(tmp_path / "b.warm")
    precious = tmp_path / "precious.bin"
    precious.write_bytes(b"\0\0the user's data\n")
    os.link(precious, f"{bundle}-journal")
    for args in (("clean", bundle, "--max-size", "1K"), ("stats", bundle)):
        proc = warm(*args)
        assert precious.read_bytes() == b"\0\0the user's data\n", args
        assert proc.returncode == 2, proc.stdout
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "b.warm-journal is a hard link" in lines[0], proc.stderr


def test_a_pull_over_a_wal_bundle_rewrites_no_user_file_linked_as_its_shm(
    warm: Warm,
    tmp_path: Path,
    host_bundle: Callable[[Path], Path],
    http_store: tuple[Store, str, ThreadingHTTPServer],  # noqa: F811
) -> None:
    # The pull counted what PATH held that the pulled bundle lacks through a read-only
    # connection, which opened PATH's `-shm` (PATH's header says WAL), a hard link to a
    # user's file, and rewrote it as its WAL index; the pull itself went on, exit 0.
    store, base, _ = http_store
    store.files["/b.warm"] = host_bundle(tmp_path / "src.warm").read_bytes()
    target = host_bundle(tmp_path / "b.warm")
    with sqlite3.connect(target) as conn:
        assert conn.execute("PRAGMA journal_mode = WAL").fetchone() == ("wal",)
    conn.close()
    precious = _user_file_as_shm(target)
    proc = warm("pull", f"{base}/b.warm", target)
    assert precious.read_bytes() == b"the user's data\n"
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert target.read_bytes() == store.files["/b.warm"]  # pulled, its -shm not read


def test_a_fifo_journal_planted_beside_a_bundle_a_writer_has_open_never_hangs_it(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    # A writer's next write had SQLite open the `-journal` to see whether it was hot: a
    # FIFO's open waits for a writer of it, for ever, deaf to signals.
    bundle = host_bundle(tmp_path / "b.warm")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    code = LIVE.replace(
        "shutil.copyfile(sys.argv[3], sys.argv[1] + ", "os.rename(sys.argv[3], sys.argv[1] + "
    )
    proc = subprocess.run(
        [sys.executable, "-c", "import os\n" + code, str(bundle), "write", str(fifo)],
        capture_output=True,
        text=True,
        env=warm.env,
        timeout=60,
        cwd=ROOT,
    )
    lines = proc.stdout.splitlines()
    assert lines[0] == "6 3"
    assert lines[1].startswith("error: ") and "is not a regular file" in lines[1], lines
