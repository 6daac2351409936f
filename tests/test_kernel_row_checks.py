"""The fast checks of a kernel row accept exactly what the field-by-field checks do."""

from __future__ import annotations

import itertools
import sqlite3

from warmcli.bundle.kernel_row import _JOINED, _NAMED_AT, _over_limit
from warmcli.bundle.rows import _HEX64, _IDENTIFIER, _SYMBOL, MAX_NAME_CHARS

HEX = "0123456789abcdef" * 4
TRICKY = (
    "", "a", "_", "9a", "a9", "A_z", "é", "a\x00", "\x00", "a\n", "\na", "a b", "a-b",
    HEX, HEX.upper(), HEX[:-1], HEX + "0", HEX + "\n", HEX[:-1] + "g", HEX[:-1] + "\x00",
    f"warm_{HEX[:16]}_k", f"warm_{HEX[:16]}_", f"warm_{HEX[:15]}_k", f"warm_{HEX[:16]}k",
    f"warm_{HEX[:16]}_k\x00", f"warm_{HEX[:16]}_9", f"Warm_{HEX[:16]}_k", f"warm_{HEX[:16]}_k_1",
    "\u0661", "k\u0661", "ß", "K",  # non-ASCII digits and letters: refused by both
)  # fmt: skip


def test_one_joined_match_accepts_what_the_four_patterns_do() -> None:
    for key, sha, entry, symbol in itertools.product(TRICKY, repeat=4):
        each = all(
            p.fullmatch(v)
            for p, v in ((_HEX64, key), (_HEX64, sha), (_IDENTIFIER, entry), (_SYMBOL, symbol))
        )
        joined = _JOINED.fullmatch(f"{key}\x00{sha}\x00{entry}\x00{symbol}\x00")
        assert bool(joined) == each, (key, sha, entry, symbol)


def test_over_limit_names_what_sqlite_length_would() -> None:
    conn = sqlite3.connect(":memory:")
    long, nul = "n" * (MAX_NAME_CHARS + 1), "n" * 10 + "\x00" + "n" * MAX_NAME_CHARS
    values = ("host", long, nul, long.encode(), b"\x00" * (MAX_NAME_CHARS + 1), 7, 1.5, None)
    for value in values:
        for name, at in _NAMED_AT:
            row: list[object] = ["x"] * 13
            row[at] = value
            (length,) = conn.execute("SELECT length(?)", (value,)).fetchone()
            said = f"{name} {length}" if length is not None and length > MAX_NAME_CHARS else None
            assert _over_limit(tuple(row)) == said
