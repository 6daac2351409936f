"""What hostile46 found and left, each reproduced for real: the real CLI in a subprocess, real
SQLite files (a bundle from `warm run`, edited with sqlite3 as an attacker would), the real
production loader; and, as a pure-logic unit test, warm's own writer against its reader."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
from pathlib import Path

from conftest import Warm
from test_hostile46 import _peak

from warmcli.bundle.candidates import pack
from warmcli.records import CandidateMeasurement, tune_key


def _tunes_of_random_names(source: Path, path: Path, tunes: int, candidates: int) -> Path:
    """`source` with `tunes` more tunes of its first, each of `candidates` pending candidates
    under random names, packed by warm's own writer: rows of about 8 bytes a candidate, as
    legitimate as their size allows (each its own shapes, so in this bundle alone)."""
    shutil.copyfile(source, path)
    conn = sqlite3.connect(path)
    with conn:
        row = conn.execute("SELECT * FROM tunes ORDER BY rowid LIMIT 1").fetchone()
        operation, shape, device, checksum = row[1], row[2], row[3], row[4]
        kernel = hashlib.sha256(b"k").hexdigest()
        for i in range(tunes):
            names = {os.urandom(4).hex() for _ in range(candidates)}
            packed = pack(CandidateMeasurement(n, kernel, "pending", None, (), "") for n in names)
            key = bytes.fromhex(tune_key(operation, f"{shape} r{i}", device, checksum.hex()))
            values = (key, operation, f"{shape} r{i}", device, checksum, "pending", None, packed)
            conn.execute(
                "INSERT INTO tunes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values + row[8:]
            )
    conn.close()
    return path


def test_diff_keeps_no_candidates_of_the_tunes_it_lists(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """`warm diff` kept up to 1,000 tunes found in one bundle only as records with every
    candidate (only their names, picks and whether two such tunes name the same kernels are
    shown): 12 tunes of 40,000 candidates, a 3 MB bundle, held 298 MiB more than a diff of
    the bundle with itself, where `warm verify`, which reads one tune at a time, holds 52;
    1,000 of them (a 250 MB bundle) would hold GBs. A listed tune keeps its pick's
    candidate and a digest of its candidates' names and kernels now."""
    warm, good = made
    many = _tunes_of_random_names(good, tmp_path / "many.warm", tunes=12, candidates=20_000)
    one_at_a_time = _peak(warm, "verify", many) - _peak(warm, "verify", good)
    grown = _peak(warm, "diff", good, many) - _peak(warm, "diff", good, good)
    assert grown < one_at_a_time + (16 << 20), f"{grown >> 20} MiB more"
    shown = warm("diff", good, many, "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["tunes"]["only_b_count"] == 12


def test_a_checksum_twin_names_the_same_kernels_only_where_it_does(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """`checksum_twins` reads whether two tunes of one operation, shapes and device under
    another checksum name the same candidates and kernels: from a digest of each now (the
    tunes' candidates are no longer kept), so it must still tell the two cases apart."""
    warm, good = made
    for same in (True, False):
        other = tmp_path / f"other{same}.warm"
        shutil.copyfile(good, other)
        with sqlite3.connect(other) as conn:
            row = conn.execute("SELECT * FROM tunes ORDER BY rowid LIMIT 1").fetchone()
            checksum = hashlib.sha256(b"another check").digest()
            key = bytes.fromhex(tune_key(row[1], row[2], row[3], checksum.hex()))
            pick, cands = row[6], row[7]
            if not same:  # another candidate, on another kernel: another set of kernels
                pick = "extra"
                cands = pack((CandidateMeasurement(pick, "e" * 64, "ok", 1e-5, (1e-5,), ""),))
            conn.execute("DELETE FROM tunes WHERE key = ?", (row[0],))
            values = (key, *row[1:4], checksum, row[5], pick, cands, *row[8:])
            conn.execute("INSERT INTO tunes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values)
        conn.close()
        shown = warm("diff", good, other, "--json")
        assert shown.returncode == 0, shown.stderr
        [twin] = json.loads(shown.stdout)["tunes"]["checksum_differs"]
        assert twin["same_kernels"] is same
