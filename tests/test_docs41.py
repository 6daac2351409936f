"""The README's claims that stop 41 changed or added, run as a new user would run them.

- `warm clean`'s Ctrl-C in a vacuum that removed nothing: the README quoted the line as
  `warm: interrupted: removed nothing: the bundle is whole, every entry kept`, cut short of
  what warm prints (` (the file may not have shrunk)`) with no `...` to say so: it now
  quotes the whole line, which this test reads back from a real interrupted clean.

Real parts throughout: the CLI in a subprocess, the system C compiler, SQLite bundles.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import sqlite3
import time
from pathlib import Path

from conftest import EXAMPLES, ROOT, Warm


def _quoted_in_readme(line: str) -> bool:
    """Whether the README quotes `line` whole, in backquotes (its line breaks read as one
    space)."""
    text = re.sub(r"\s*\n\s*", " ", (ROOT / "README.md").read_text())
    return f"`{line}`" in text


def _holds(pid: int, name: Path) -> bool:
    """Whether process `pid` has the file `name` open."""
    folder = Path(f"/proc/{pid}/fd")
    try:
        return any(os.readlink(folder / fd) == str(name) for fd in os.listdir(folder))
    except OSError:  # (a descriptor closed as it was read)
        return False


def test_the_quoted_in_readme_a_vacuum_only_cleans_interrupt_whole(
    warm: Warm, tmp_path: Path
) -> None:
    """A clean that removes nothing but vacuums, Ctrl-C'd while its vacuum waits for the
    write lock this test holds: the line it prints is the README's quote, word for word."""
    bundle = tmp_path / "b.warm"
    made = warm("run", EXAMPLES / "matmul_host.py", "-b", bundle, "-q", "--no-verify")
    assert made.returncode == 0, made.stderr
    with contextlib.closing(sqlite3.connect(bundle)) as db:  # a tenth of the file free pages
        db.execute("CREATE TABLE junk(x)")
        db.execute("INSERT INTO junk VALUES (zeroblob(4000000))")
        db.commit()
        db.execute("DROP TABLE junk")
        db.commit()
    lock = Path(f"{os.path.realpath(bundle)}.lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another writer's: the vacuum waits for it
        proc = warm.popen("clean", bundle)
        deadline = time.monotonic() + 30
        while not _holds(proc.pid, lock) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # (waiting on the lock)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        os.close(fd)
    assert proc.returncode == 130, err
    [line] = err.strip().splitlines()
    assert "removed nothing" in line, line
    assert _quoted_in_readme(line), line


def test_a_pull_url_whose_name_decodes_to_no_utf8_is_named_as_given(
    warm: Warm, tmp_path: Path
) -> None:
    """`warm pull URL` with no PATH refuses a name that percent-decodes to no UTF-8 (README:
    `warm pull`), before any request: it said `its name '' is no bundle file`, naming an
    empty name the URL does not hold; now it names the URL's own, `x%FFy.warm`, and why."""
    url = "http://127.0.0.1:9/x%FFy.warm"  # (the discard port: nothing is asked of it)
    done = warm("pull", url, cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line == (
        f"warm: error: {url}: its name 'x%FFy.warm' decodes to no UTF-8: name the file to write"
    ), line
    assert list(tmp_path.iterdir()) == []  # nothing written
