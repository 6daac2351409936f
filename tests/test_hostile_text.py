"""Hostile text in a bundle: escapes, CR/LF and Rich markup never reach a terminal or a log raw.

A real bundle made by `warm run` has its labels, operations, shapes, candidate names,
toolchains, fingerprints and manifest values rewritten with sqlite3 (the row keys kept
consistent, so warm reads every row), then every command that shows them runs as a
user would run it, and a production process logs its misses with `WARM_EXPLAIN=1`.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, SERVE_MATMUL, Warm
from forked_cli import forked_made, forked_warm  # noqa: F401  (conftest's, commands forked)

from warmcli.bundle.candidates import decode, pack
from warmcli.printable import printable
from warmcli.records import tune_key

MATMUL = EXAMPLES / "matmul_host.py"
HOSTILE = (
    "\x1b]0;pwned\x07\x1b[2J\r\nwarm: miss: forged\r [/] [bold red]x[/bold red] :smile: "
    "\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\\x9b31m\u202eevil"
)


def hostile_copy(source: Path, path: Path) -> Path:
    """`source` with hostile text in every field warm shows (every row still well formed)."""
    shutil.copyfile(source, path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE manifest SET value = ? WHERE key = 'warm_version'", (HOSTILE,))
        conn.execute(
            "INSERT INTO fingerprints VALUES (?, 'device', ?)",
            (f"device:{HOSTILE}", json.dumps({"name": HOSTILE})),
        )
        conn.execute("UPDATE kernels SET label = ? || label", (HOSTILE,))
        conn.execute(  # no content hash to recompute its key from (else corrupt: integrity35)
            "UPDATE kernels SET toolchain = ?, components = json_remove(components, '$.kernel') "
            "WHERE entry = 'row_sum'",
            (HOSTILE,),
        )
        rows = conn.execute(  # format 3: a key and a checksum as bytes, kernel keys by id
            "SELECT key, operation, shape_key, device, lower(hex(checksum)), candidates FROM tunes"
        ).fetchall()
        ids = dict(conn.execute("SELECT key, id FROM tune_kernels").fetchall())
        keys = {i: k.hex() for k, i in ids.items()}
        for i, (key, operation, shape, device, checksum, candidates) in enumerate(rows):
            if i == 0:  # a shape the workload asks for, now hostile: a miss explained by shape
                shape = f"{shape}{HOSTILE}"
            elif i == 1:  # hostile candidate names and pick
                cands = decode(candidates, keys.__getitem__)
                items = [replace(c, name=f"{c.name}{HOSTILE}") for c in cands]
                conn.execute(
                    "UPDATE tunes SET candidates = ?, pick = pick || ? WHERE key = ?",
                    (pack(items, ids.__getitem__), HOSTILE, key),
                )
            new = bytes.fromhex(tune_key(operation, shape, device, checksum))
            conn.execute("UPDATE tunes SET key = ?, shape_key = ? WHERE key = ?", (new, shape, key))
        key, shape, device, checksum = rows[2][0], rows[2][2], rows[2][3], rows[2][4]
        operation = f"matmul{HOSTILE}"
        conn.execute(  # one more tune, of a hostile operation
            "INSERT INTO tunes SELECT ?, ?, shape_key, device, checksum, status, pick, candidates,"
            " seconds, measured_at, updated FROM tunes WHERE key = ?",
            (bytes.fromhex(tune_key(operation, shape, device, checksum)), operation, key),
        )
    conn.close()
    return path


@pytest.fixture(scope="module")
def bundles(made: tuple[Warm, Path]) -> tuple[Warm, Path, Path]:
    """conftest's `made` (the host example's bundle, as `warm run` makes it) and a hostile
    copy of it beside it."""
    warm, clean = made
    return warm, clean, hostile_copy(clean, clean.parent / "hostile.warm")


def assert_inert(proc: subprocess.CompletedProcess[str], codes: tuple[int, ...] = (0,)) -> str:
    """No escape, bell or bare CR reached the output, no traceback, an expected exit code."""
    text = proc.stdout + proc.stderr
    assert proc.returncode in codes, text
    for raw in ("\x1b", "\x07", "\r", "\x9b", "\u202e"):
        assert raw not in text, (raw, text)
    assert "Traceback" not in text and "MarkupError" not in text, text
    assert not any(line.startswith("warm: miss: forged") for line in text.splitlines()), text
    return text


@pytest.mark.parametrize(
    "args, codes",
    [
        (("stats", "{hostile}"), (0,)),
        (("stats", "{hostile}", "--explain", "matmul"), (0,)),
        (("stats", "{hostile}", "--explain", "nothing"), (2,)),
        (("diff", "{clean}", "{hostile}"), (0,)),
        (("check", "{hostile}", "--device", "host"), (1,)),
        (("clean", "{hostile}", "--dry-run"), (0,)),
        (("verify", "{hostile}"), (0,)),
        (("merge", "{clean}", "{hostile}", "-o", "{hostile}.merged"), (0,)),
        (("verify", "{hostile}", "--workload", str(MATMUL), "--explain-misses"), (1,)),
    ],
)
def test_commands_show_hostile_text_inert(
    bundles: tuple[Warm, Path, Path], args: tuple[str, ...], codes: tuple[int, ...]
) -> None:
    warm, clean, hostile = bundles
    argv = [a.format(clean=clean, hostile=hostile) for a in args]
    text = assert_inert(warm(*argv), codes)
    if argv[0] == "stats":
        assert printable(HOSTILE) in text  # shown, escaped, not dropped


def test_production_explain_log_cannot_be_forged(bundles: tuple[Warm, Path, Path]) -> None:
    warm, _, hostile = bundles
    proc = subprocess.run(
        [sys.executable, "-c", SERVE_MATMUL.format(examples=str(EXAMPLES))],
        env=dict(warm.env, WARM_BUNDLE=str(hostile), WARM_EXPLAIN="1", WARM_REPORT="1"),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    text = assert_inert(proc)
    misses = [line for line in proc.stderr.splitlines() if line.startswith("warm: miss:")]
    assert len(misses) == 3, proc.stderr  # row_sum (toolchain), two tunes (shape, pick)
    assert any(printable(HOSTILE) in line for line in misses), text


def test_printable_escapes_controls_and_keeps_text() -> None:
    """Unit test of the pure helper."""
    assert printable("tile32 µs →") == "tile32 µs →"
    assert printable("a\x1b[2Jb\r\n\x07\x9b\u202e") == "a\\x1b[2Jb\\x0d\\x0a\\x07\\x9b\\u202e"


def test_a_pattern_is_compiled_on_its_first_use_and_matches_as_re_does() -> None:
    """`printable.Pattern`: warm's modules define patterns without compiling them at import."""
    import copy
    import re

    from warmcli.printable import Pattern

    pattern = Pattern(r"([0-9]+)\.tmp")
    assert "fullmatch" not in vars(pattern)  # nothing compiled yet
    assert pattern.fullmatch("12.tmp")[1] == "12"  # type: ignore[index]
    assert pattern.sub("#", "a1.tmp b") == re.sub(r"([0-9]+)\.tmp", "#", "a1.tmp b")
    assert "fullmatch" in vars(pattern)  # bound once
    assert copy.copy(Pattern("a+")).findall("aab a") == ["aa", "a"]
