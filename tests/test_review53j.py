"""Holes review53j found in the bounds on a bundle's schema load and the opens around them,
each reproduced for real: real SQLite files, a real second process writing into the bundle,
warm's own lock and threads (no fake)."""

from __future__ import annotations

import inspect
import subprocess
import sys
import threading
import time
from pathlib import Path

from test_compact_tunes import _format1, _tune

from warmcli.bundle import file
from warmcli.bundle.file import FORMAT_VERSION, check_header
from warmcli.bundle.store import Bundle

_MIGRATE = (
    "import sys; from warmcli.bundle.store import Bundle\n"
    "Bundle.open(sys.argv[1], write=True).close()"
)


def _waits_for_lock(thread: threading.Thread) -> bool:
    """Whether `thread` waits at `_open_connection`'s `with _lock` (its header read)."""
    lines, first = inspect.getsourcelines(file._open_connection)
    at = first + next(n for n, line in enumerate(lines) if "with _lock," in line)
    frame = sys._current_frames().get(thread.ident or 0)
    return (
        frame is not None
        and frame.f_code is file._open_connection.__code__
        and (frame.f_lineno == at)
    )


def test_a_read_open_meeting_another_process_s_migration_is_no_refusal(tmp_path: Path) -> None:
    """A production process opening an old-format bundle read its header (format 2), then
    waited for warm's open lock (another thread's open); meanwhile another process's writer
    migrated the bundle to this format (one SQLite transaction, header and schema together).
    The open compared the new schema with format 2's: 'refused: its schema is not warm's', a
    legitimate bundle refused. It opens, as the format it is now."""
    path = tmp_path / "old.warm"
    _format1(path, [_tune(0)], version=2)
    opened: list[object] = []
    with file._lock:  # another thread's open, held
        reader = threading.Thread(target=lambda: opened.append(_open(path)))
        reader.start()
        end = time.monotonic() + 30
        while not _waits_for_lock(reader) and time.monotonic() < end:
            time.sleep(0.005)
        assert _waits_for_lock(reader), "the reader never reached the open's lock"
        done = subprocess.run([sys.executable, "-c", _MIGRATE, str(path)], capture_output=True)
        assert done.returncode == 0, done.stderr
        assert check_header(path)[0] == FORMAT_VERSION  # migrated by the other process
    reader.join(30)
    assert len(opened) == 1 and isinstance(opened[0], Bundle), opened
    with opened[0] as bundle:
        assert bundle.tune(_tune(0).key) is not None


def _open(path: Path) -> object:
    try:
        return Bundle.open(path)
    except Exception as exc:  # what the thread met: the test names it
        return exc


# warm's own migration of the bundle `argv[1]` (format 2), which died after its commit wrote
# the bundle's pages, before SQLite removed the journal: the journal's name, linked aside just
# before the COMMIT (SQLite unlinks it, never truncates it, in the bundle's journal mode), is
# put back, hot
_MIGRATION_CUT = """
import os, sqlite3, sys
from warmcli.bundle.migrate import migrate
from warmcli.bundle.schema import FORMAT_VERSION, TUNES_SCHEMA
journal = sys.argv[1] + "-journal"
class Cut(sqlite3.Connection):
    def execute(self, sql, *args):
        if sql == "COMMIT":
            os.link(journal, journal + ".kept")
        return super().execute(sql, *args)
conn = sqlite3.connect(sys.argv[1], isolation_level=None, factory=Cut)
migrate(conn, FORMAT_VERSION, TUNES_SCHEMA)
conn.close()
os.rename(journal + ".kept", journal)
"""


def test_a_migration_cut_after_its_pages_were_written_is_no_refusal(tmp_path: Path) -> None:
    """A writer killed inside a migration's commit (the bundle's pages written, the journal
    not yet removed) left a bundle whose header says this format and a hot journal that
    restores format 2. An open read the header (format 3), rolled the journal back (format
    2) and checked the restored schema against format 3's: 'refused: its schema is not
    warm's', a legitimate bundle refused by every first open after the crash (a production
    process's included). It opens, as the format the rollback restored."""
    path = tmp_path / "old.warm"
    _format1(path, [_tune(n) for n in range(50)], version=2)
    done = subprocess.run([sys.executable, "-c", _MIGRATION_CUT, str(path)], capture_output=True)
    assert done.returncode == 0, done.stderr
    assert check_header(path)[0] == FORMAT_VERSION and Path(f"{path}-journal").stat().st_size
    for write in (False, True):  # a read (production), then a write on a fresh cut
        with Bundle.open(path, write=write) as bundle:
            assert bundle.tune(_tune(7).key) is not None
        if not write:
            assert check_header(path)[0] == 2  # rolled back: format 2 whole
            path.unlink()
            _format1(path, [_tune(n) for n in range(50)], version=2)
            cut = subprocess.run([sys.executable, "-c", _MIGRATION_CUT, str(path)])
            assert cut.returncode == 0
    assert check_header(path)[0] == FORMAT_VERSION  # the writer migrated it again
