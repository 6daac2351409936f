"""Holes hostile46 found, each reproduced for real: the real CLI in a subprocess (its peak
memory: one started for it; what a command says: a fork, `tests/forked_cli.py`), real
SQLite files (a bundle from `warm run`, edited with sqlite3 as an attacker would)."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

from conftest import ROOT, Warm
from test_blob_memory import _PEAK
from tune_rows import add_other_tunes, add_tunes


def _with_blobs(source: Path, path: Path, cache_pages: int = 0, made: bool = False) -> Path:
    """`source` with 24 MiB more of well-formed blobs (each under its own sha256), or, `made`,
    `source` as it is (such a bundle already); with `cache_pages`, its header's suggested
    cache size set to that many pages, as `PRAGMA default_cache_size` writes it (offset 48:
    a number in the file, nothing more)."""
    shutil.copyfile(source, path)
    conn = sqlite3.connect(path)
    with conn:
        for _ in range(0 if made else 3):
            data = os.urandom(8 << 20)
            digest = hashlib.sha256(data).hexdigest()
            conn.execute("INSERT INTO blobs VALUES (?, ?, ?)", (digest, len(data), data))
    if cache_pages:
        conn.execute(f"PRAGMA default_cache_size = {cache_pages}")
    conn.close()
    return path


def _peak(warm: Warm, *args: object) -> int:
    """The peak RSS, in bytes, of `warm *args` (its exit code 0 or 1)."""
    return _peak_run(warm, *args)[0]


def _peak_run(warm: Warm, *args: object) -> tuple[int, subprocess.CompletedProcess[str]]:
    """`_peak`, and how that run of `warm *args` ended (its stdout as `warm`'s, its stderr
    with the peak's line last): for a test that also checks what the measured run said."""
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK, *map(str, args)],
        capture_output=True,
        text=True,
        env=warm.env,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr[-1500:]
    return int(proc.stderr.rsplit("peak ", 1)[1].split()[0]), proc


def test_a_cache_size_in_the_bundles_header_never_sets_warms_memory(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """SQLite takes a file's suggested cache size (the deprecated `default_cache_size`, in its
    header) as the connection's: a bundle saying 2,000,000,000 pages had every page warm read
    kept in memory, so `warm verify` (and `warm push`, which checks what it sends) held the
    whole bundle (a 315 MB one: 47 → 358 MB peak), and `warm clean`'s vacuum too (46 → 357
    MB). Every connection warm opens on a bundle now sets SQLite's own default cache
    (2,000 KiB) after the file's schema is checked. 24 MiB of blobs: `warm verify` grew 22 MiB
    with `OWN_CACHE` undone (47 with 48 MiB), 0 as fixed (stop 50)."""
    warm, good = made
    plain = _with_blobs(good, tmp_path / "plain.warm")
    # the same bundle, but for the cache size its header suggests (its blobs made once)
    hostile = _with_blobs(plain, tmp_path / "hostile.warm", 2_000_000_000, made=True)
    for command in (("verify",), ("clean", "--older-than", "0s")):
        flat = _peak(warm, command[0], plain, *command[1:])
        grown = _peak(warm, command[0], hostile, *command[1:]) - flat
        assert grown < 16 << 20, f"warm {command[0]}: {grown >> 20} MiB more"


def test_merge_refusing_an_existing_out_leaves_no_lock_beside_it(
    made: tuple[Warm, Path], tmp_path: Path, forked: Callable[[Warm], Warm]
) -> None:
    """`warm merge A -o notes.txt` (a file that is there, no --force) is refused, as it should
    be, but took OUT's write lock first and left `notes.txt.lock` in the user's folder (`warm
    pull` refuses such a PATH before its lock: none left)."""
    warm, good = made
    out = tmp_path / "notes.txt"
    out.write_text("mine\n")
    for json in ((), ("--json",)):
        proc = forked(warm)("merge", good, "-o", out, *json)  # (its output: forked)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "exists: name it as an input to merge into it, or pass --force" in proc.stderr
        assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
        assert out.read_text() == "mine\n"


def _tunes_of_many_candidates(
    source: Path, path: Path, tunes: int, candidates: int, named: bool = True
) -> Path:
    """`source` with `tunes` more tunes of its first (keyed as warm keys them), each holding
    `candidates` unmeasured candidates, packed as warm packs them, its pick the one named
    '': each named by its index in hex (at most 0.4 a stored byte, as warm's own tunes
    are: see tests/test_hostile46b.py), or, not `named`, all named '' (17 bytes each,
    deflated: ~100 KB of them in a row of ~100 bytes, which warm refuses now)."""

    def one(i: int) -> bytes:
        name = f"{i:x}".encode() if named and i else b""
        return b"\0" + struct.pack("<I", len(name)) + name + struct.pack("<3I", 0, 0, 0)

    raw = struct.pack("<I", candidates) + b"".join(map(one, range(candidates)))
    packed = b"\1" + zlib.compress(raw, 9)  # format 2's tag: deflated, kernel keys whole
    return add_tunes(source, path, tunes, packed, "")


def test_stats_of_tunes_of_many_candidates_holds_and_shows_a_bounded_part(
    made: tuple[Warm, Path], tmp_path: Path, forked: Callable[[Warm], Warm]
) -> None:
    """A tune's packed candidates may inflate to 4 MiB: 246,000 of 17 bytes, from a row of
    4 KB. `warm stats` held every tune of a listing (up to 20,000) with all of them, as
    records and then as dicts, and a table of a tune's candidates rendered every one: 13
    such tunes (a 393 KB bundle) took 2.2 GB and 41 s, one tune shown alone 1 GB and 97 s.
    Each tune is now made into what the tables show as it is read (its pick's figures from
    all its candidates, its first 1,000 by median listed, the rest counted)."""
    warm, good = made
    many = _tunes_of_many_candidates(good, tmp_path / "many.warm", tunes=12, candidates=40_000)
    flat = _peak(warm, "stats", good)
    grown = _peak(warm, "stats", many) - flat
    assert grown < 48 << 20, f"{grown >> 20} MiB more"
    one = _tunes_of_many_candidates(good, tmp_path / "one.warm", tunes=1, candidates=40_000)
    shown = forked(warm)("stats", one, "--explain", "matmul")  # (its output: forked)
    assert shown.returncode == 0, shown.stderr
    assert "and 39,000 more candidate(s) not listed" in shown.stdout, shown.stdout[-2000:]
    assert len(shown.stdout.splitlines()) < 5_000


def test_stats_explain_of_a_large_bundle_holds_its_sampled_tunes_as_shown(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A bundle of more than 200 tunes is summarised: the first 100 tunes of the operation
    `--explain` names (20 of its operations without it) were read whole and held as records,
    every candidate of each (30 tunes of 246,000: 2.6 GB). Each is made into what the
    tables show (`tune_shown`) as it is read now (203 MB)."""

    warm, good = made
    # 6 tunes: 70 MiB more before the fix, 22 after (12: 138 and 42, nearer the bound)
    many = _tunes_of_many_candidates(good, tmp_path / "many.warm", tunes=6, candidates=40_000)
    add_other_tunes(many, 201)  # of another operation: a bundle too large to list
    flat = _peak(warm, "stats", good, "--explain", "matmul")
    grown = _peak(warm, "stats", many, "--explain", "matmul") - flat
    assert grown < 48 << 20, f"{grown >> 20} MiB more"
