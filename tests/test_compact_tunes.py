"""Format 2: a tune's candidates packed (every sample exact), format 1 read and migrated."""

from __future__ import annotations

import json
import sqlite3
import struct
import zlib
from pathlib import Path

import pytest

from warmcli.bundle.candidates import DEFLATED, MAX_PACKED_BYTES, RAW, pack, unpack
from warmcli.bundle.file import APPLICATION_ID, FORMAT_VERSION, SCHEMAS
from warmcli.bundle.store import Bundle, BundleError
from warmcli.records import CandidateMeasurement, TuneRecord, tune_key

CANDIDATES = (
    CandidateMeasurement("c0", "ab" * 32, "ok", 1.25e-4, (1.2e-4, 1.3e-4, 0.1 + 0.2, 5e-324)),
    CandidateMeasurement("bröken\udcff", "NOT-HEX", "failed", None, (), "it crashed\nhere"),
    CandidateMeasurement("p", "", "pending"),
    CandidateMeasurement("odd", "AB" * 32, "other", 0.0, tuple(float(i) for i in range(300))),
)


def test_pack_keeps_every_field_and_sample_exactly() -> None:
    assert unpack(pack(CANDIDATES)) == CANDIDATES
    assert unpack(pack(())) == ()
    same = (CandidateMeasurement("c", "00" * 32, "ok", 1e-4, (1e-4,) * 5),) * 4
    assert unpack(pack(same)) == same
    record = TuneRecord("k", "op", "s", "d", "c", "measured", "c0", same)
    assert len(pack(same)) * 3 < len(record.candidates_json())


@pytest.mark.parametrize(
    "data",
    [
        b"",
        bytes((7,)) + b"x",
        bytes((RAW,)) + struct.pack("<I", 1),  # one candidate, cut short
        bytes((RAW,)) + struct.pack("<I", 0xFFFFFFFF),  # a count no bytes back
        pack(CANDIDATES)[:-3],
        bytes((RAW,)) + zlib.decompress(pack(CANDIDATES)[1:]) + b"\0",  # trailing bytes
        bytes((DEFLATED,)) + b"not deflated",
        bytes((DEFLATED,)) + zlib.compress(b"\0" * (MAX_PACKED_BYTES + 1)),  # a bomb
        bytes((RAW,)) + struct.pack("<IB", 1, 0xF0),  # flags that are no candidate's
    ],
)
def test_unpack_refuses_what_pack_never_writes(data: bytes) -> None:
    with pytest.raises(ValueError):
        unpack(data)


def _tune(i: int) -> TuneRecord:
    checksum = "cd" * 32
    key = tune_key("op", f"s{i}", "dev", checksum)
    return TuneRecord(key, "op", f"s{i}", "dev", checksum, "measured", "c0", CANDIDATES[:2])


def _format1(path: Path, tunes: list[TuneRecord], signed: bool = False, version: int = 1) -> None:
    """A bundle as warm 1 wrote it: candidates as JSON text, format version 1 (`version` 2:
    as warm 2 wrote it, keys and checksums as hex text, candidates packed whole)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executescript(
        f"BEGIN; {SCHEMAS[version][0]} PRAGMA application_id = {APPLICATION_ID}; "
        f"PRAGMA user_version = {version}; COMMIT;"
    )
    conn.execute("INSERT INTO manifest VALUES ('format_version', ?)", (str(version),))
    for t in tunes:
        row = (t.key, t.operation, t.shape_key, t.device, t.checksum, t.status, t.pick)
        cands = t.candidates_json() if version == 1 else pack(t.candidates)
        conn.execute(
            "INSERT INTO tunes VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (*row, cands, t.seconds, t.measured_at, 0.0),
        )
    if signed:
        conn.execute("INSERT INTO signatures VALUES ('0' , x'00', x'00', x'', 0)")
    conn.close()


def _stored(path: Path) -> tuple[int, set[str], str]:
    conn = sqlite3.connect(path)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        kinds = {r[0] for r in conn.execute("SELECT typeof(candidates) FROM tunes")}
        manifest = conn.execute("SELECT value FROM manifest WHERE key = 'format_version'")
        return version, kinds, manifest.fetchone()[0]
    finally:
        conn.close()


def test_format1_is_served_read_only_and_migrated_on_a_write_open(tmp_path: Path) -> None:
    path, tunes = tmp_path / "old.warm", [_tune(i) for i in range(3)]
    _format1(path, tunes)
    with Bundle.open(path) as bundle:  # a read-only production machine serves it as it is
        assert [bundle.tune(t.key) for t in tunes] == tunes
        with bundle.snapshot():
            assert not [p for _, p in bundle.integrity() if p and "format" in p]  # verify agrees
    assert _stored(path) == (1, {"text"}, "1")
    with Bundle.open(path, write=True) as bundle:
        assert [bundle.tune(t.key) for t in tunes] == tunes
        assert [t.key for t in bundle.each_tune(order="rowid")] == [t.key for t in tunes]
    assert _stored(path) == (FORMAT_VERSION, {"blob"}, str(FORMAT_VERSION))
    with Bundle.open(path, write=True) as bundle:  # once only
        bundle.put(tunes=[_tune(9)])
        assert bundle.tune(_tune(9).key) == _tune(9)


def test_a_signed_format1_bundle_keeps_its_signed_rows_as_they_are(tmp_path: Path) -> None:
    path = tmp_path / "signed.warm"
    _format1(path, [_tune(0)], signed=True)
    with Bundle.open(path, write=True) as bundle:
        assert bundle.tune(_tune(0).key) == _tune(0)
        bundle.put(tunes=[_tune(1)])
    assert _stored(path) == (FORMAT_VERSION, {"text", "blob"}, str(FORMAT_VERSION))


def test_a_corrupt_format1_row_stays_a_named_corrupt_entry(tmp_path: Path) -> None:
    path = tmp_path / "bad.warm"
    _format1(path, [_tune(0)])
    conn = sqlite3.connect(path)
    conn.execute("UPDATE tunes SET candidates = '[{\"nope\": 1}]'")
    conn.commit()
    conn.close()
    with Bundle.open(path, write=True) as bundle, pytest.raises(BundleError, match="candidates"):
        bundle.tune(_tune(0).key)
    assert json.loads(sqlite3.connect(path).execute("SELECT candidates FROM tunes").fetchone()[0])


def test_a_format1_bundle_merges_with_a_format2_one(tmp_path: Path) -> None:
    """An old bundle and a new one merge (by the real CLI): OUT is in the current format,
    holds both bundles' tunes, and the old input is left as it was."""
    import subprocess
    import sys

    old, new, out = tmp_path / "old.warm", tmp_path / "new.warm", tmp_path / "out.warm"
    _format1(old, [_tune(0), _tune(1)])
    with Bundle.create(new) as bundle:
        bundle.put(tunes=[_tune(2)])
    proc = subprocess.run(
        [sys.executable, "-m", "warmcli", "merge", old, new, "-o", out],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    with Bundle.open(out) as merged:
        assert [merged.tune(_tune(i).key) for i in range(3)] == [_tune(i) for i in range(3)]
    assert _stored(out) == (FORMAT_VERSION, {"blob"}, str(FORMAT_VERSION))
    assert _stored(old) == (1, {"text"}, "1")


def test_verify_names_a_format1_bundle_as_format_1(tmp_path: Path) -> None:
    """`warm verify` reports the format the file is in, not the one this warm writes."""
    import json as json_module
    import subprocess
    import sys

    old = tmp_path / "old.warm"
    _format1(old, [_tune(0)])
    proc = subprocess.run(
        [sys.executable, "-m", "warmcli", "verify", old, "--json"],
        capture_output=True,
        text=True,
    )
    doc = json_module.loads(proc.stdout)
    assert doc["integrity"]["format_version"] == 1, proc.stdout + proc.stderr
    assert _stored(old) == (1, {"text"}, "1")  # verify reads, never migrates
