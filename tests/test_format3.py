"""Format 3: tune keys and checksums as bytes, statuses as codes, candidates' kernel keys
interned; formats 1 and 2 read as they are and migrated, signed rows still signed."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import struct
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_compact_tunes import _format1

from warmcli.bundle.candidates import INTERNED, decode, kernel_ids, pack, signed_form, unpack
from warmcli.bundle.file import FORMAT_VERSION
from warmcli.bundle.signature_report import signature_report
from warmcli.bundle.signing import DOMAIN, key_id, row_hash, sign
from warmcli.bundle.store import Bundle, BundleError
from warmcli.records import CandidateMeasurement, TuneRecord, tune_key

KERNELS = [hashlib.sha256(bytes([i])).hexdigest() for i in range(3)]
CANDIDATES = (
    CandidateMeasurement("c0", KERNELS[0], "ok", 1.25e-4, (1.2e-4, 1.3e-4, 0.1 + 0.2, 5e-324)),
    CandidateMeasurement("c1", KERNELS[1], "failed", None, (), "it crashed"),
    CandidateMeasurement("c2", "NOT-HEX", "ok", 2e-4, (2e-4,) * 5),
)
# What a signature of format 2 covered: every column as stored (all text then).
FORMAT2_SIGNED = (
    ("manifest", "SELECT key, value FROM manifest WHERE key IS NOT 'updated'"),
    ("fingerprints", "SELECT identity, kind, data FROM fingerprints"),
    ("blobs", "SELECT sha256, size FROM blobs"),
    ("tunes", "SELECT key, operation, shape_key, device, checksum, status, pick, candidates, "
     "seconds, measured_at FROM tunes"),
)  # fmt: skip


def _tune(i: int, status: str = "measured") -> TuneRecord:
    checksum = KERNELS[i % 2]
    key = tune_key("op", f"s{i}", "dev", checksum)
    pick = "c0" if status == "measured" else None
    return TuneRecord(key, "op", f"s{i}", "dev", checksum, status, pick, CANDIDATES, 0.5, 7.0)


def test_interned_candidates_keep_every_field_and_sample() -> None:
    ids: dict[bytes, int] = {}
    packed = pack(CANDIDATES, lambda k: ids.setdefault(k, len(ids) + 1))
    assert packed[0] in (INTERNED, INTERNED + 1) and len(ids) == 2
    keys = {i: k.hex() for k, i in ids.items()}

    def lookup(kernel_id: int) -> str:  # as a bundle's reader: a ValueError if no such id
        if kernel_id not in keys:
            raise ValueError(f"no kernel id {kernel_id}")
        return keys[kernel_id]

    assert unpack(packed, lookup) == CANDIDATES
    assert len(packed) < len(pack(CANDIDATES)) - 2 * 24  # each key: 4 + 4 bytes, not 32
    assert kernel_ids(packed)[0] == (1, 2)
    assert signed_form(packed, lookup) == packed + bytes.fromhex("".join(KERNELS[:2]))
    with pytest.raises(ValueError, match="by id"):
        unpack(packed)  # ids, and no table to read them from
    for bad in (
        bytes((INTERNED + 1,)) + bytes(4) + b"not deflated",
        bytes((INTERNED,)) + (9).to_bytes(4, "little"),  # more ids than bytes
        bytes((INTERNED,)) + (1).to_bytes(4, "little") + (7).to_bytes(4, "little"),  # no id 7
        packed[:-3],
    ):
        with pytest.raises(ValueError):
            unpack(bad, lookup)


def _format2(path: Path, tunes: list[TuneRecord]) -> None:
    """A bundle as warm wrote format 2: keys, checksums and statuses as text, candidates
    packed with every kernel key whole."""
    _format1(path, tunes, version=2)


def sign_as_format2(path: Path, private: Any, public: bytes) -> None:
    """Sign the bundle at `path` as warm signed format 2 (every column as stored)."""
    conn = sqlite3.connect(path)
    hashes = b"".join(
        sorted({row_hash(t, row) for t, sql in FORMAT2_SIGNED for row in conn.execute(sql)})
    )
    signature = private.sign(DOMAIN + hashlib.sha256(hashes).digest())
    conn.execute(
        "INSERT INTO signatures VALUES (?, ?, ?, ?, 1.0)",
        (key_id(public), public, signature, hashes),
    )
    conn.commit()
    conn.close()


def _types(path: Path) -> tuple[int, set[tuple[str, ...]], int]:
    conn = sqlite3.connect(path)
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        kinds = set(
            conn.execute(
                "SELECT typeof(key), typeof(checksum), typeof(status), typeof(candidates) "
                "FROM tunes"
            ).fetchall()
        )
        has = conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'tune_kernels'")
        return version, kinds, has.fetchone()[0]
    finally:
        conn.close()


def test_format2_is_read_as_it_is_and_migrated_on_a_write_open(tmp_path: Path) -> None:
    path, tunes = tmp_path / "two.warm", [_tune(0), _tune(1, "pending"), _tune(2)]
    _format2(path, tunes)
    with Bundle.open(path) as bundle:  # read-only: served as it is, never migrated
        assert [bundle.tune(t.key) for t in tunes] == tunes
        assert bundle.tune_keys() == sorted(t.key for t in tunes)
        assert bundle.aggregate()[1] == [("op", "dev", 3, 1)]
    assert _types(path) == (2, {("text", "text", "text", "blob")}, 0)
    with Bundle.open(path, write=True) as bundle:
        assert [bundle.tune(t.key) for t in tunes] == tunes
        assert [t.key for t in bundle.each_tune(order="rowid")] == [t.key for t in tunes]
        assert bundle.aggregate()[1] == [("op", "dev", 3, 1)]
        bundle.put(tunes=[_tune(3)])
        bundle.delete(tune_keys=[_tune(2).key])
        assert bundle.tune(_tune(2).key) is None and bundle.tune(_tune(3).key) == _tune(3)
    assert _types(path) == (FORMAT_VERSION, {("blob", "blob", "integer", "blob")}, 1)
    conn = sqlite3.connect(path)
    held = {k.hex() for (k,) in conn.execute("SELECT key FROM tune_kernels")}
    tags = {r[0] for r in conn.execute("SELECT substr(candidates, 1, 1) FROM tunes")}
    conn.close()
    assert held == set(KERNELS[:2]) and tags <= {bytes((INTERNED,)), bytes((INTERNED + 1,))}


def test_format1_migrates_to_format3_through_the_cli(tmp_path: Path, warm: Warm) -> None:
    """A format-1 file (candidates JSON) becomes format 3 at `warm clean`; stats, verify,
    diff and merge read both the old file and the migrated one."""
    old, new = tmp_path / "one.warm", tmp_path / "three.warm"
    tunes = [_tune(0), _tune(1, "pending")]
    for path in (old, new):
        _format1(path, tunes)
        with sqlite3.connect(path) as conn:  # the whole manifest, as warm writes it
            conn.executemany(
                "INSERT INTO manifest VALUES (?, ?)",
                [("warm_version", "1.0"), ("created", "1.0"), ("updated", "1.0")],
            )

    dry = warm("clean", new, "--dry-run")
    assert dry.returncode == 0 and "format 1: a clean without --dry-run migrates it" in dry.stdout
    assert _types(new)[0] == 1  # a dry run changes nothing
    cleaned = warm("clean", new)
    assert cleaned.returncode == 0
    assert f"migrated from format 1 to {FORMAT_VERSION}" in " ".join(cleaned.stdout.split())
    assert _types(new) == (FORMAT_VERSION, {("blob", "blob", "integer", "blob")}, 1)
    doc = json.loads(warm("clean", new, "--json").stdout)
    assert doc["format"] == {"before": FORMAT_VERSION, "after": FORMAT_VERSION}
    assert _types(old)[0] == 1
    for args in (("verify", new), ("stats", new), ("stats", "--json", old), ("diff", old, new)):
        proc = warm(*args)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, (args, proc.stderr)
    merged = tmp_path / "merged.warm"
    assert warm("merge", old, new, "-o", merged).returncode == 0
    with Bundle.open(merged) as bundle:
        assert [bundle.tune(t.key) for t in tunes] == tunes


def test_a_signed_format2_bundle_stays_signed_once_migrated(tmp_path: Path) -> None:
    """A format-2 signature covers keys and checksums as text: after the migration stores
    them as bytes, every entry is still covered, but the signature vouches for the bundle
    only in the format it signed: refused under the key until signed again."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    path, tunes = tmp_path / "signed.warm", [_tune(0), _tune(1)]
    _format2(path, tunes)
    private = ed25519.Ed25519PrivateKey.generate()
    public = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    sign_as_format2(path, private, public)
    with Bundle.open(path, write=True) as bundle:  # migrated: the candidates kept as signed
        report = signature_report(bundle, [public])
        assert all(s.valid for s in report.signatures) and report.rows == 3
        assert report.signatures[0].covers == 2  # every entry, as signed, but not the format
        # the format the signature vouched for is not the bundle's any more: it vouches
        # for nothing until signed again (never re-signed by the migration)
        (problem,) = report.problems
        assert "no longer covers the bundle: signed at format 2, it is format 3" in problem
        bundle.put(tunes=[_tune(5)])  # a row written after: not covered
    assert _types(path)[0] == FORMAT_VERSION
    with pytest.raises(BundleError, match="no longer covers"):
        Bundle.open(path, trusted_keys=[public])
    with Bundle.open(path, write=True) as bundle:  # signed again, by the rows kept
        sign(bundle, private, keep=lambda t, n, h: (t, n) != ("tunes", _tune(5).key))
    with Bundle.open(path, trusted_keys=[public]) as bundle:
        assert [bundle.tune(t.key) for t in tunes] == tunes
        assert bundle.tune(_tune(5).key) is None and bundle.refused(_tune(5).key)


def test_a_format3_signature_covers_the_interned_kernel_keys(tmp_path: Path) -> None:
    """Signed in format 3, a tune names its kernels, not their ids: swapping an interned
    key after signing leaves the row uncovered, never served."""
    from cryptography.hazmat.primitives.asymmetric import ed25519

    from warmcli.bundle.signing import _raw_public

    path = tmp_path / "three.warm"
    with Bundle.create(path) as bundle:
        bundle.put(tunes=[_tune(0)])
        private = ed25519.Ed25519PrivateKey.generate()
        sign(bundle, private)
    public = _raw_public(private.public_key())
    with Bundle.open(path, trusted_keys=[public]) as bundle:
        assert bundle.tune(_tune(0).key) == _tune(0)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE tune_kernels SET key = ? WHERE id = 1", (bytes(32),))
    conn.commit()
    conn.close()
    with Bundle.open(path, trusted_keys=[public]) as bundle:
        assert bundle.tune(_tune(0).key) is None and bundle.refused(_tune(0).key)
        assert signature_report(bundle, [public]).uncovered == 1


@pytest.mark.parametrize(
    "edit",
    [
        "DELETE FROM tune_kernels",
        "UPDATE tune_kernels SET key = zeroblob(70000000) WHERE id = 1",
        "UPDATE tune_kernels SET key = 'not bytes' WHERE id = 1",
        "UPDATE tunes SET status = 7",
        "UPDATE tunes SET key = zeroblob(32)",
        "UPDATE tunes SET checksum = x'00'",
        "DROP TABLE tune_kernels",
    ],
)
def test_a_hostile_format3_row_is_a_named_corrupt_entry(tmp_path: Path, edit: str) -> None:
    path = tmp_path / "bad.warm"
    with Bundle.create(path) as bundle:
        bundle.put(tunes=[_tune(0)])
    conn = sqlite3.connect(path)
    conn.execute(edit)
    conn.commit()
    conn.close()
    try:
        with Bundle.open(path) as bundle:
            found = list(bundle.each_tune(on_error=lambda key, why: None))
            assert found == []
            problems: list[str] = []
            list(bundle.each_tune(on_error=lambda key, why: problems.append(why)))
            assert problems and problems[0].startswith("corrupt tune entry")
    except BundleError as exc:  # a schema that is not warm's is refused whole
        assert "DROP" in edit and "schema is not warm's" in str(exc)


def test_decode_reads_every_format() -> None:
    record = _tune(0)
    assert decode(record.candidates_json()) == CANDIDATES
    assert decode(pack(CANDIDATES)) == CANDIDATES


def test_a_candidate_naming_no_kernel_of_its_document_is_named_so_even_when_cut_short() -> None:
    """A measured candidate's kernel id, median and count are read as one: an id past the
    document's kernels is named as such, whole or cut short after the id (as field by field)."""
    head = bytes((INTERNED,)) + struct.pack("<II", 1, 5)  # one kernel: id 5
    name = struct.pack("<IBI", 1, 3, 1) + b"c"  # one candidate: key by id, "ok", a median

    def doc(local: int) -> bytes:
        return head + name + struct.pack("<IdIdI", local, 1.0, 1, 1.0, 0)

    one = (CandidateMeasurement("c", KERNELS[0], "ok", 1.0, (1.0,)),)
    assert unpack(doc(0), lambda i: KERNELS[0]) == one
    for bad in (doc(3), doc(3)[: len(head + name) + 6]):
        with pytest.raises(ValueError, match="kernel 3 of 1"):
            unpack(bad, lambda i: KERNELS[0])
