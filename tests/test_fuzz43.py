"""Findings of a fuzzing campaign against untrusted bundles, each through the real CLI.

- A label holding an invisible character that `printable` let through (a Hangul filler,
  a variation selector, a combining grapheme joiner: Unicode's default-ignorable code
  points) was shown raw by `warm stats`: `sq` and `sq` followed by U+3164 read alike.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from conftest import Warm

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
