"""What hostile46 found and left, each reproduced for real: the real CLI in a subprocess, real
SQLite files (a bundle from `warm run`, edited with sqlite3 as an attacker would), the real
production loader; and, as a pure-logic unit test, warm's own writer against its reader."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

from conftest import EXAMPLES, ROOT, Warm
from test_hostile46 import _peak, _peak_run, _tunes_of_many_candidates
from test_production_defaults import serve

from warmcli.bundle.candidates import pack, unpack
from warmcli.records import CandidateMeasurement, tune_key

_FLAT: dict[tuple[object, ...], int] = {}


def _flat(warm: Warm, *args: object) -> int:
    """`_peak` of `warm *args` over the module's sound bundle (`made`'s, one file a test
    process, only ever copied): the baseline several tests measure against (`verify`, `diff`
    of it with itself), measured once a test process."""
    key = (*sorted(warm.env.items()), *map(str, args))
    if key not in _FLAT:
        _FLAT[key] = _peak(warm, *args)
    return _FLAT[key]


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
    made: tuple[Warm, Path], tmp_path: Path, forked: Callable[[Warm], Warm]
) -> None:
    """`warm diff` kept up to 1,000 tunes found in one bundle only as records with every
    candidate (only their names, picks and whether two such tunes name the same kernels are
    shown): 12 tunes of 40,000 candidates, a 3 MB bundle, held 298 MiB more than a diff of
    the bundle with itself, where `warm verify`, which reads one tune at a time, holds 52;
    1,000 of them (a 250 MB bundle) would hold GBs (here: 12 of 12,000). A listed tune
    keeps its pick's candidate and a digest of its candidates' names and kernels now."""
    warm, good = made
    many = _tunes_of_random_names(good, tmp_path / "many.warm", tunes=12, candidates=12_000)
    one_at_a_time = _peak(warm, "verify", many) - _flat(warm, "verify", good)
    grown = _peak(warm, "diff", good, many) - _flat(warm, "diff", good, good)
    assert grown < one_at_a_time + (16 << 20), f"{grown >> 20} MiB more"
    shown = forked(warm)("diff", good, many, "--json")  # (its output: forked)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["tunes"]["only_b_count"] == 12


def test_a_checksum_twin_names_the_same_kernels_only_where_it_does(
    made: tuple[Warm, Path], tmp_path: Path, forked: Callable[[Warm], Warm]
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
        shown = forked(warm)("diff", good, other, "--json")  # (its output: forked)
        assert shown.returncode == 0, shown.stderr
        [twin] = json.loads(shown.stdout)["tunes"]["checksum_differs"]
        assert twin["same_kernels"] is same


def test_a_tune_of_more_candidates_than_its_stored_bytes_is_refused(
    made: tuple[Warm, Path], tmp_path: Path, forked: Callable[[Warm], Warm]
) -> None:
    """A tune's packed candidates inflating to 4 MiB of 246,000 candidates from a row of 4 KB
    cost every reading command 0.7 s and ~90 MB to decode (an 80 MB bundle of them: hours).
    warm never writes more candidates than the document has bytes (its own rows: at most
    0.6 a byte, measured), so a row saying more is malformed: refused before one is read."""
    warm, good = made
    one = _tunes_of_many_candidates(
        good, tmp_path / "one.warm", tunes=1, candidates=246_000, named=False
    )
    for command in (("verify",), ("check",), ("clean", "--dry-run")):
        flat = _flat(warm, command[0], good, *command[1:])
        peak, done = _peak_run(warm, command[0], one, *command[1:])
        assert peak - flat < 24 << 20, f"warm {command[0]}: {(peak - flat) >> 20} MiB more"
        if command == ("verify",):  # what the measured `warm verify ONE` said
            assert done.returncode == 1, done.stdout + done.stderr
            said = done.stdout + done.stderr
            assert "(warm writes one a byte at most)" in said, said[-1500:]
            assert "Traceback" not in said, said[-1500:]
    # in production the same row, under the key the example looks up, is a miss
    served = tmp_path / "served.warm"
    shutil.copyfile(good, served)
    raw = (246_000).to_bytes(4, "little") + (b"\0" + bytes(16)) * 246_000
    with sqlite3.connect(served) as conn:
        conn.execute("UPDATE tunes SET candidates = ?", (b"\1" + zlib.compress(raw, 9),))
    conn.close()
    hot = serve(warm, WARM_BUNDLE=str(served))
    assert hot.returncode == 0 and "Traceback" not in hot.stderr, hot.stderr[-1500:]


def test_warms_writer_never_writes_what_its_reader_refuses() -> None:
    """Pure logic, no fakes needed: a document of candidates deflating to fewer bytes than
    it has candidates (here 20,000 alike) is written as it is, undeflated, so the reader's
    rule (no more candidates than stored bytes) never refuses a row warm wrote."""
    kernel = hashlib.sha256(b"k").hexdigest()
    alike = tuple(CandidateMeasurement("", kernel, "pending", None, (), "") for _ in range(20_000))
    for intern in (None, lambda key: 7):
        packed = pack(alike, intern)
        assert len(packed) >= len(alike)
        assert unpack(packed, lambda i: kernel) == alike


def test_reading_a_tune_of_many_candidates_costs_their_bytes_not_a_dict_each(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A tune warm may read (120,000 candidates, within both rules: 3 MB inflated, 0.4 a
    stored byte) cost `warm verify` 336 bytes a candidate for its record's own dict, and
    `warm merge`, which packs it again, seven objects more a candidate for its fields
    (120,000: 52 and 140 MiB more than the bundle without it). A candidate's fields are kept
    inline now, and a document is packed as its fields are made."""
    warm, good = made
    big = _tunes_of_many_candidates(good, tmp_path / "big.warm", tunes=1, candidates=120_000)
    for command in (("verify",), ("merge", "-o", tmp_path / "out.warm", "--force")):
        flat = _flat(warm, command[0], good, *command[1:])  # (merge's: into this test's file)
        grown = _peak(warm, command[0], big, *command[1:]) - flat
        assert grown < 40 << 20, f"warm {command[0]}: {grown >> 20} MiB more"


_SERVED_PEAK = """
import runpy, sys, warmcli
runpy.run_path(sys.argv[1])["workload"](warmcli.runtime("host"))
status = open("/proc/self/status").read().splitlines()
print("peak", int(next(s for s in status if s.startswith("VmHWM:")).split()[1]) << 10)
"""


def _served_peak(warm: Warm, bundle: Path) -> int:
    """The peak RSS, in bytes, of the host example served from `bundle` (misses explained)."""
    proc = subprocess.run(
        [sys.executable, "-c", _SERVED_PEAK, str(EXAMPLES / "matmul_host.py")],
        env={**warm.env, "WARM_BUNDLE": str(bundle), "WARM_EXPLAIN": "1"},
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-1500:]
    assert "warm: miss: tune matmul" in proc.stderr, proc.stderr[-1500:]
    return int(proc.stdout.rsplit("peak ", 1)[1].split()[0])


def test_a_tune_miss_holds_no_candidates_of_the_tunes_it_compares(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A production process's tune miss is explained by the bundle's nearest tune of the
    operation: every tune of it was read and held with every candidate, and their names
    joined, for the process's life (12 tunes of 120,000 candidates, a 3.9 MB bundle: 358
    MB peak and 7 s where the example alone takes 39 MB). Each is held without its
    candidates now, their names as a bounded text, and the one whose kernels are compared
    is read again."""
    warm, good = made
    peaks = []
    for tunes in (1, 4):  # (before: 133 MiB more with 6 tunes of 120,000)
        held = _tunes_of_many_candidates(
            good, tmp_path / f"held{tunes}.warm", tunes=tunes, candidates=80_000
        )
        with sqlite3.connect(held) as conn:  # the example's own tunes gone: each a miss
            conn.execute("DELETE FROM tunes WHERE rowid <= 3")
        conn.close()
        peaks.append(_served_peak(warm, held))
    grown = peaks[1] - peaks[0]
    assert grown < 24 << 20, f"{grown >> 20} MiB more"


def test_a_miss_holds_candidate_names_bounded_and_still_told_apart() -> None:
    """Pure logic, no fakes: a held tune's candidate names, joined, were held whole for an
    explanation's comparison (names of 4,096 characters each, deflated: megabytes from a row
    of kilobytes). Past 4,096 characters they are cut and told apart by a digest."""
    from warmcli.runtime.tune_listing import names_text

    long = ["x" * 4096 + str(i) for i in range(1000)]
    assert len(names_text(long)) < 400
    assert names_text(long) == names_text(reversed(long))
    assert names_text(long) != names_text([*long[:-1], "y"])
    assert names_text(["b", "a"]) == "a, b"  # short: whole, as before


def _tunes_of_long_reasons(source: Path, path: Path, tunes: int) -> Path:
    """`source` with `tunes` more tunes of its first, each of one candidate (its pick) whose
    reason is 4 MiB of one letter: a row of 4 KB."""
    shutil.copyfile(source, path)
    conn = sqlite3.connect(path)
    with conn:
        row = conn.execute("SELECT * FROM tunes ORDER BY rowid LIMIT 1").fetchone()
        reason = b"x" * ((4 << 20) - 128)  # its fields as warm packs them, then deflated
        raw = struct.pack("<IBI", 1, 3, 1) + b"p" + bytes(32) + struct.pack("<dId", 1e-5, 1, 1e-5)
        packed = b"\1" + zlib.compress(raw + struct.pack("<I", len(reason)) + reason, 9)
        assert len(packed) < 8192
        for i in range(tunes):
            key = bytes.fromhex(tune_key(row[1], f"{row[2]} w{i}", row[3], row[4].hex()))
            values = (key, row[1], f"{row[2]} w{i}", *row[3:6], "p", packed, *row[8:])
            conn.execute("INSERT INTO tunes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values)
    conn.close()
    return path


def test_diff_keeps_no_reason_of_a_listed_tunes_pick(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A listed tune kept its pick's candidate whole: its reason may inflate to 4 MiB from a
    row of 4 KB, and a diff lists 1,000 tunes (12 such, a 400 KB bundle: 71 MiB more;
    1,000: 4 GB). Its pick is kept without samples or reason now."""
    warm, good = made
    many = _tunes_of_long_reasons(good, tmp_path / "reasons.warm", tunes=12)
    grown = _peak(warm, "diff", good, many) - _flat(warm, "diff", good, good)
    assert grown < 40 << 20, f"{grown >> 20} MiB more"  # (one tune read: ~20 MiB)


def test_stats_holds_the_line_of_a_reason_a_table_shows(
    made: tuple[Warm, Path], tmp_path: Path, forked: Callable[[Warm], Warm]
) -> None:
    """`warm stats` made each tune into what its table shows as it was read (hostile46), but
    kept each shown candidate's reason whole, where the table shows one line of it: 100
    tunes of a 4 MiB reason each, an 870 KB bundle, took 463 MB (20 here: ~87 MiB more).
    The line shown is kept, cut to 1,000 characters, read from the first 64 KiB."""
    warm, good = made
    many = _tunes_of_long_reasons(good, tmp_path / "reasons.warm", tunes=20)
    grown = _peak(warm, "stats", many) - _flat(warm, "stats", good)
    assert grown < 40 << 20, f"{grown >> 20} MiB more"
    shown = forked(warm)("stats", many, "--explain", "matmul")  # (its output: forked)
    assert shown.returncode == 0 and "x" * 100 in shown.stdout, shown.stderr[-1500:]
    assert len(shown.stdout) < 1 << 20
