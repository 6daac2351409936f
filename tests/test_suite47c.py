"""`tests/big_bundle.build_big`, rewritten for speed (its tunes inserted in one batch, a
large bundle built once per test process and copied), writes the very rows it wrote
before: checked against the build as it was (`legacy_build`, its SQL calling Python per
tune row), on real SQLite files through warm's own schema."""

from __future__ import annotations

import hashlib
import os
import random
import sqlite3
from pathlib import Path

import big_bundle
import pytest
from big_bundle import BLOBS, OPERATIONS, TOOLCHAIN, build_big

from bench.scale import cubin_like
from warmcli.bundle.candidates import as_bytes, decode, pack
from warmcli.bundle.store import Bundle
from warmcli.errors import BundleError
from warmcli.records import tune_key

# The tunes as `build_big` wrote them until stop 47: Python functions called per row.
LEGACY_TUNES = f"""
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?),
c(j) AS (VALUES (0), (1), (2), (3))
INSERT INTO tunes SELECT
    warm_bytes(warm_tune_key(op, shape, device, checksum)), op, shape, device,
    warm_bytes(checksum), 0, 'c0', warm_pack((SELECT {big_bundle._CANDIDATES} FROM c)), 0.01,
    1000.0, 1000.0
FROM (SELECT 'op' || (i % {OPERATIONS}) AS op, 'float32[' || i || ']' AS shape,
             'cuda|NVIDIA H100|sm_90|550.54' AS device,
             printf('%064x', i % {OPERATIONS}) AS checksum FROM n)
"""


def legacy_build(path: Path, kernels: int, tunes: int, seed: int = 0) -> Path:
    """`build_big` as it was until stop 47."""
    rng = random.Random(seed)
    binaries = [
        cubin_like(80 if r % 2 == 0 else 90, rng.randbytes(4096 - 64)) for r in range(BLOBS)
    ]
    with Bundle.create(path) as bundle, bundle.transaction() as conn:
        conn.create_function("warm_tune_key", 4, tune_key, deterministic=True)
        interned: dict[bytes, int] = {}

        def pack_json(text: str) -> bytes:
            return pack(decode(text), lambda k: interned.setdefault(k, len(interned) + 1))

        conn.create_function("warm_pack", 1, pack_json)
        conn.create_function("warm_bytes", 1, as_bytes, deterministic=True)
        conn.executemany(
            "INSERT INTO blobs VALUES (?, ?, ?)",
            [(hashlib.sha256(b).hexdigest(), len(b), b) for b in binaries],
        )
        conn.execute(big_bundle._KERNELS, (kernels, TOOLCHAIN, BLOBS))
        conn.execute(LEGACY_TUNES, (tunes,))
        conn.executemany(
            "INSERT INTO tune_kernels VALUES (?, ?)", [(i, k) for k, i in interned.items()]
        )
    return path


def contents(path: Path) -> list[object]:
    """Every row of every table of the bundle at `path`, rowids included, in rowid order
    (the manifest's times left out: a build's own), its schema and its page count."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        schema = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
        rows: list[object] = [schema, conn.execute("PRAGMA page_count").fetchone()]
        for kind, name, _ in schema:
            if kind != "table":
                continue
            table = conn.execute(f'SELECT * FROM "{name}" ORDER BY rowid').fetchall()
            if name == "manifest":
                table = [r for r in table if r[0] not in ("created", "updated")]
            rows.append((name, table))
        return rows
    finally:
        conn.close()


@pytest.mark.parametrize(
    "size", [(10, 10), (7, 130, 3), (0, 5), (5, 0), (100, 2_500), (2_000, 1_000, 1)]
)
def test_build_big_writes_the_rows_it_wrote_before(tmp_path: Path, size: tuple[int, ...]) -> None:
    new = build_big(tmp_path / "new.warm", *size)
    old = legacy_build(tmp_path / "old.warm", *size)
    assert contents(new) == contents(old)
    assert sorted(os.listdir(tmp_path)) == [
        "new.warm",
        "new.warm.lock",
        "old.warm",
        "old.warm.lock",
    ]


def test_a_cached_build_is_copied_whole_and_each_copy_is_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a cache folder named (as conftest names one), a large build is made once and
    copied: each copy holds the same rows as a fresh build, a copy changed leaves the
    next one as built, and a bundle already at the path is written to, never replaced."""
    monkeypatch.setenv(big_bundle.CACHE_FOLDER, str(tmp_path / "cache"))
    (tmp_path / "cache").mkdir()
    first = build_big(tmp_path / "a" / "first.warm", 1_500, 1_000, seed=2)
    cached = tmp_path / "cache" / "1500-1000-2.warm"
    made = cached.stat().st_mtime_ns
    with sqlite3.connect(first) as conn:
        conn.execute("DELETE FROM tunes")
    conn.close()
    second = build_big(tmp_path / "b" / "second.warm", 1_500, 1_000, seed=2)
    assert cached.stat().st_mtime_ns == made  # copied, not built again
    assert (tmp_path / "b" / "second.warm.lock").exists()
    fresh = legacy_build(tmp_path / "fresh.warm", 1_500, 1_000, seed=2)
    assert contents(second) == contents(fresh)
    # onto a bundle already there: opened and written to, as ever (never copied over it)
    before = contents(second)
    with pytest.raises(BundleError, match="UNIQUE"):  # (its rows are there already)
        build_big(second, 1_500, 1_000, seed=2)
    assert contents(second) == before
