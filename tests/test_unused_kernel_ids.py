"""Removing tunes removes, in the same transaction, every interned kernel key
(`tune_kernels`) no tune names any more; an id is never reused (the highest id stays,
named or not), so a reader that kept an id's key never reads another kernel under it.
Real bundle files, and `warm clean` in a subprocess."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path

from warmcli.bundle.store import Bundle
from warmcli.records import CandidateMeasurement, TuneRecord, tune_key

K = [hashlib.sha256(bytes([i])).hexdigest() for i in range(5)]


def _tune(shape: str, device: str, kernels: list[str], status: str = "measured") -> TuneRecord:
    cands = tuple(
        CandidateMeasurement(f"c{i}", k, "ok", 1e-4, (1e-4,)) for i, k in enumerate(kernels)
    )
    checksum = hashlib.sha256(shape.encode()).hexdigest()
    key = tune_key("op", shape, device, checksum)
    pick = "c0" if status == "measured" else None
    return TuneRecord(key, "op", shape, device, checksum, status, pick, cands, 0.5, 7.0)


def _held(path: Path) -> dict[int, str]:
    conn = sqlite3.connect(path)
    try:
        return {i: k.hex() for i, k in conn.execute("SELECT id, key FROM tune_kernels")}
    finally:
        conn.close()


def test_warm_clean_of_tunes_removes_the_kernel_keys_no_tune_names(tmp_path: Path) -> None:
    path = tmp_path / "b.warm"
    gone = _tune("s0", "host|elsewhere", [K[0], K[1]])  # measured on no device here
    kept = _tune("s1", "host|elsewhere", [K[1], K[2]], status="pending")  # kept, unjudged
    with Bundle.create(path) as bundle:
        bundle.put(tunes=[gone, kept])
    assert _held(path) == {1: K[0], 2: K[1], 3: K[2]}
    proc = subprocess.run(
        [sys.executable, "-m", "warmcli", "clean", path], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _held(path) == {2: K[1], 3: K[2]}
    with Bundle.open(path) as bundle:
        assert bundle.tune(kept.key) == kept and bundle.tune(gone.key) is None


def test_the_highest_id_stays_so_no_id_is_reused(tmp_path: Path) -> None:
    path = tmp_path / "b.warm"
    first, second = _tune("s0", "d", [K[0]]), _tune("s1", "d", [K[1], K[2]])
    with Bundle.create(path) as bundle:
        bundle.put(tunes=[first, second])
        bundle.delete(tune_keys=[second.key])
        assert _held(path) == {1: K[0], 3: K[2]}  # 2 unused: gone; 3, the highest: kept
        bundle.delete(tune_keys=[first.key])
        assert _held(path) == {3: K[2]}
        third = _tune("s2", "d", [K[3]])
        bundle.put(tunes=[third])
        assert _held(path) == {3: K[2], 4: K[3]}
        assert bundle.tune(third.key) == third


def test_a_tune_whose_kernel_ids_cannot_be_read_keeps_every_key(tmp_path: Path) -> None:
    """A corrupt document names ids no one can read: none is removed on its account."""
    path = tmp_path / "b.warm"
    first, second = _tune("s0", "d", [K[0]]), _tune("s1", "d", [K[1], K[2]])
    with Bundle.create(path) as bundle:
        bundle.put(tunes=[first, second])
    conn = sqlite3.connect(path)
    conn.execute("UPDATE tunes SET candidates = x'02ffffffff' WHERE shape_key = 's0'")
    conn.commit()
    conn.close()
    with Bundle.open(path, write=True) as bundle:
        bundle.delete(tune_keys=[second.key])
    assert _held(path) == {1: K[0], 2: K[1], 3: K[2]}
