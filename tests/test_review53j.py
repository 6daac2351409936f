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


# A production process's later try at its bundle (it was locked at the first: `Reopening`) at
# a file swapped in meanwhile: one table of 1,000 columns whose defaults are 900-term sums
# (1.8 MB, ~60 MB parsed); the peak memory the try grew by (MiB) and what it raised
_SWAPPED_IN = """
import resource, sqlite3, sys
from warmcli.bundle import reopening
from warmcli.bundle.store import Bundle
from warmcli.errors import BundleLocked
path, total = sys.argv[1], "+".join(["1"] * 900)
Bundle.create(path).close()
conn = sqlite3.connect(path, isolation_level=None)
conn.execute("PRAGMA writable_schema = ON")
columns = ", ".join(f"c{n} DEFAULT ({total})" for n in range(1000))
sql = f"CREATE TABLE h ({columns})"
conn.execute("INSERT INTO sqlite_master VALUES ('table', 'h', 'h', 0, ?)", (sql,))
conn.close()
reopening.REOPEN_SECONDS = 0  # (its next try at once)
store = reopening.Reopening(path, lambda: Bundle.open(path), BundleLocked(path + ": locked"))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    store.kernel("0" * 64)
except Exception as exc:
    said = str(exc)
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) >> 10, said)
"""


def test_a_reopenings_probe_of_a_file_swapped_in_loads_its_schema_bound(tmp_path: Path) -> None:
    """A production process locked out at its first open probes the lock at a later read
    (`reopening._free`) through a connection of its own: SQLite loaded the schema of the
    file there whole, unbounded, before the open's check refused it: a file swapped in cost
    the serving process 48-59 MiB and 0.25 s (1.8 MB of schema) at each try, every 5 s, and
    as much more as its schema is long. The probe's load is bound as an open's: ~0 MiB."""
    done = subprocess.run(
        [sys.executable, "-c", _SWAPPED_IN, str(tmp_path / "swapped.warm")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    grown, said = done.stdout.split(" ", 1)
    assert "refused: its schema is not warm's" in said, said
    assert int(grown) < 16, f"{grown} MiB more"
