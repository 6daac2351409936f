"""Hostile review of stats48 (`warm stats` keeps nothing per candidate): on a bundle large
enough to stream (over `NAMED_TUNES` tunes), `--explain OP --json` read the kernels OP's
candidates name in a set's order, so of several corrupt kernel rows the one its error named
changed from run to run (with Python's hash seed); and the text listing's boundary (at most
`TUNE_TABLES` tunes shown as tables, their candidates now deflated until shown) still
escapes what a candidate's name holds. The real CLI in a subprocess, real SQLite files (the
example's bundle from `warm run`, tunes added with sqlite3, packed as warm packs them)."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from conftest import Warm
from forked_cli import forked_made  # noqa: F401  (conftest's `made`, commands forked)

from warmcli.bundle.candidates import pack
from warmcli.cli.inspect import NAMED_TUNES
from warmcli.cli.render.stats import TUNE_TABLES
from warmcli.records import CandidateMeasurement, tune_key


def _with_tunes(source: Path, path: Path, count: int, operation: str, names: list[str]) -> Path:
    """`source` with `count` more tunes of `operation` (shapes `s<i>`), each of the same
    candidates (`names`, in order: the first picked), naming its kernels in turn."""
    shutil.copyfile(source, path)
    conn = sqlite3.connect(path)
    with conn:
        kernels = [r[0] for r in conn.execute("SELECT key FROM kernels ORDER BY key")]
        row = conn.execute("SELECT * FROM tunes ORDER BY rowid LIMIT 1").fetchone()
        packed = pack(
            CandidateMeasurement(name, kernels[j % len(kernels)], "ok", 1e-3 + j * 1e-6, (1e-3,))
            for j, name in enumerate(names)
        )
        device, checksum = row[3], row[4]
        conn.executemany(
            "INSERT INTO tunes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                (
                    bytes.fromhex(tune_key(operation, f"s{i}", device, checksum.hex())),
                    *(operation, f"s{i}", device, checksum, 0, names[0], packed, *row[8:]),
                )
                for i in range(count)
            ),
        )
    conn.close()
    return path


def test_explain_json_of_a_streamed_bundle_names_the_same_corrupt_kernel_every_run(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """Every kernel row but one has a symbol not its key's: which one the error named was
    the first of a set of keys (Python's hash seed: '696f…', 'f26c…', 'f375…' in four
    runs). The kernels are read in key order now: one line, exit 2, the same each run, and
    on stdout only the error's JSON object (no part of a document). (Started processes,
    never forks: each command's hash seed is what differs.)"""
    warm, good = made
    names = [f"c{j}" for j in range(6)]
    path = _with_tunes(good, tmp_path / "big.warm", NAMED_TUNES + 1, "rep", names)
    conn = sqlite3.connect(path)
    with conn:
        first = conn.execute("SELECT min(key) FROM kernels").fetchone()[0]
        conn.execute(
            "UPDATE kernels SET symbol = 'warm_0000000000000000_x' WHERE key != ?", (first,)
        )
    conn.close()
    said = set()
    for seed in ("1", "2", "3", "4"):
        seeded = Warm(dict(warm.env, PYTHONHASHSEED=seed))
        shown = seeded("stats", path, "--explain", "rep", "--json")
        assert shown.returncode == 2, shown.stderr
        assert len(shown.stderr.splitlines()) == 1 and "Traceback" not in shown.stderr
        assert "corrupt kernel entry" in shown.stderr
        assert json.loads(shown.stdout) == {
            "error": shown.stderr[len("warm: error: ") :].rstrip(),
            "exit": 2,
        }
        said.add(shown.stderr)
    assert len(said) == 1, said


def test_the_tables_boundary_shows_escaped_names_whole_and_counts_beyond_it(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """`TUNE_TABLES` tunes are each a table of its candidates (held deflated until shown),
    one more and every tune is one line, its candidates counted; a candidate's name with a
    terminal escape and a bell is shown escaped either way, and in `--explain`'s tables."""
    warm, good = made
    held = sqlite3.connect(good).execute("SELECT count(*) FROM tunes").fetchone()[0]
    names = ["c\x1b[31mred", "bell\x07", *(f"n{j}" for j in range(10))]
    for extra, tables in ((TUNE_TABLES - held, True), (TUNE_TABLES + 1 - held, False)):
        path = _with_tunes(good, tmp_path / f"b{extra}.warm", extra, "matmul", names)
        for args in ((), ("--explain", "matmul")):
            shown = warm("stats", path, *args)
            assert shown.returncode == 0, shown.stderr
            assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
            if tables or args:
                assert "Tunes (" not in shown.stdout
                assert shown.stdout.count(r"c\x1b[31mred") >= extra
                assert shown.stdout.count(r"bell\x07") >= extra
                assert shown.stdout.count(" → ") == held + extra
            else:
                assert f"Tunes ({TUNE_TABLES + 1})" in shown.stdout
                rows = [r for r in shown.stdout.splitlines() if r.rstrip().endswith(" 12")]
                assert len(rows) == extra, shown.stdout[-3000:]
