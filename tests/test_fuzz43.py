"""Findings of a fuzzing campaign against untrusted bundles, each through the real CLI.

- A label holding an invisible character that `printable` let through (a Hangul filler,
  a variation selector, a combining grapheme joiner: Unicode's default-ignorable code
  points) was shown raw by `warm stats`: `sq` and `sq` followed by U+3164 read alike.
- A `-shm` hard-linked to another of the user's files beside a bundle in rollback mode
  with any `-wal` beside it too: SQLite opens a `-wal` it finds whatever the header says,
  so a read (`warm stats`) rewrote the other file (truncated to 32 KiB). Only a bundle whose
  header says WAL had its `-wal` and `-shm` judged; a read now refuses it in one line, and
  a `-wal` that is a symbolic link is named so (it was "could not open ... too many open
  files?").
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from conftest import Warm
from forked_cli import forked_made  # noqa: F401  (conftest's `made`, commands forked)

INVISIBLE = ["\u034f", "\u115f", "\u1160", "\u17b4", "\u3164", "\ufe0f", "\uffa0", "\U0001bca0",
             "\U0001d173", "\U000e0100"]  # fmt: skip


def test_stats_escapes_the_invisible_characters_of_a_label(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(good.read_bytes())
    conn = sqlite3.connect(bundle)
    label = "row_sum" + "".join(f"{c}|" for c in INVISIBLE)
    assert conn.execute("UPDATE kernels SET label = ? WHERE label = 'row_sum'", (label,)).rowcount
    conn.commit()
    conn.close()
    proc = warm("stats", bundle)
    assert proc.returncode == 0, proc.stderr
    for char in INVISIBLE:
        code = ord(char)
        shown = f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
        assert f"{shown}|" in proc.stdout and char not in proc.stdout, (shown, proc.stdout)


def test_a_read_never_rewrites_a_file_hard_linked_as_the_shm(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(good.read_bytes())
    precious = tmp_path / "precious.bin"
    data = os.urandom(40_000)
    precious.write_bytes(data)
    os.link(precious, f"{bundle}-shm")
    Path(f"{bundle}-wal").write_bytes(os.urandom(100))
    proc = warm("stats", bundle)
    assert precious.read_bytes() == data
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.count("\n") == 1 and "b.warm-shm is a hard link" in proc.stderr, proc.stderr


def test_a_read_names_a_wal_that_is_a_symbolic_link(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(good.read_bytes())
    (tmp_path / "other").write_bytes(b"precious")
    os.symlink(tmp_path / "other", f"{bundle}-wal")
    proc = warm("stats", bundle)
    assert proc.returncode == 2, proc.stdout
    assert "b.warm-wal is a symbolic link" in proc.stderr, proc.stderr
    assert (tmp_path / "other").read_bytes() == b"precious"
