"""Three holes hostile39 found, each reproduced for real: a CUDA cubin row whose blob is a
cubin cut short (or a header whose tables lie past its end), which `warm verify` judged by
its ELF header alone; a host blob over the 64 MB warm loads, which `warm verify` skipped;
and a keyed reader's seeded copy, which took the old shared folder's copy whatever its size.
Real parts only: the CLI in subprocesses, NVRTC for `--arch sm_90` (no GPU), the system cc,
real SQLite files.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import struct
from pathlib import Path

import pytest
from conftest import EXAMPLES, Warm
from test_leftovers39 import cuda_small, signed_small  # noqa: F401  (the fixtures)

from warmcli.bundle.blobs import MAX_LOADED_BYTES

SHOFF = 0x28  # e_shoff's offset in an ELF64 header


def _cut(data: bytes) -> bytes:
    return data[:4096]


def _far_table(data: bytes) -> bytes:
    return data[:SHOFF] + struct.pack("<Q", 2**63) + data[SHOFF + 8 :]


def _recut_cubins(bundle: Path, edit: object) -> int:
    """Every sm_90 row's blob replaced by `edit` of it (its sha256 recomputed): how many rows."""
    with sqlite3.connect(bundle) as conn:
        rows = conn.execute(
            "SELECT DISTINCT b.sha256, b.data FROM kernels k JOIN blobs b ON b.sha256 = k.sha256 "
            "WHERE k.arch = 'sm_90'"
        ).fetchall()
        for sha, data in rows:
            new = edit(bytes(data))  # type: ignore[operator]
            digest = hashlib.sha256(new).hexdigest()
            conn.execute("INSERT OR REPLACE INTO blobs VALUES (?, ?, ?)", (digest, len(new), new))
            conn.execute("UPDATE kernels SET sha256 = ? WHERE sha256 = ?", (digest, sha))
        conn.execute("DELETE FROM blobs WHERE sha256 NOT IN (SELECT sha256 FROM kernels)")
        (count,) = conn.execute("SELECT count(*) FROM kernels WHERE arch = 'sm_90'").fetchone()
    conn.close()
    return int(count)


@pytest.mark.parametrize("edit", [_cut, _far_table], ids=["cut", "far-table"])
def test_a_cubin_cut_short_is_named_by_verify_and_rebuilt_by_a_rewarm(
    warm: Warm,
    tmp_path: Path,
    cuda_small: Path,  # noqa: F811
    edit: object,
) -> None:
    """`warm verify` told a cubin row's blob by its ELF header only: each sm_90 row's blob
    cut to its first 4,096 bytes (its sha256 recomputed), or a header whose section table
    lies at byte 2**63, was 'sound', `warm check --arch sm_90` called it servable and `warm
    run --arch sm_90 -b` called the bundle complete, though no driver loads it. The header's
    tables must lie within the blob's length now: verify names each row (exit 1), check
    calls it unusable, clean removes it, and a re-warm builds it again."""
    bundle = tmp_path / "cut.warm"
    shutil.copyfile(cuda_small, bundle)
    rows = _recut_cubins(bundle, edit)
    verified = warm("verify", bundle)
    said = verified.stdout + verified.stderr
    assert verified.returncode == 1, said[-1500:]
    assert said.count("cubin truncated") >= min(rows, 8), said[-1500:]
    checked = warm("check", "--arch", "sm_90", bundle)
    assert checked.returncode == 1 and "cubin truncated" in checked.stdout, checked.stdout[-1500:]
    cleaned = warm("clean", "--dry-run", bundle)
    assert f"would remove {rows} kernel(s)" in cleaned.stdout, cleaned.stdout[-800:]
    done = warm("run", EXAMPLES / "saxpy_cuda.py", "--arch", "sm_90", "-b", bundle, "-q")
    assert done.returncode == 0, done.stdout[-800:] + done.stderr[-800:]
    assert f"stored {rows} new kernel(s)" in done.stdout, done.stdout
    again = warm("verify", bundle)
    assert again.returncode == 0, again.stdout[-1500:]


def test_verify_names_a_blob_over_what_warm_loads_which_production_never_serves(
    warm: Warm,
    tmp_path: Path,
    signed_small: tuple[Path, Path, Path],  # noqa: F811
) -> None:
    """A host row whose blob is its real library padded to 70 MB (its sha256 recomputed)
    is never loaded (`Bundle.blob` refuses a blob over the 64 MB warm loads: production
    misses it and compiles it, `warm check` names it), yet `warm verify` skipped it as a
    blob 'named by other checks' and said sound, exit 0. It names each such row now (exit 1)."""
    _, _, unsigned = signed_small
    bundle = tmp_path / "big-host.warm"
    shutil.copyfile(unsigned, bundle)
    with sqlite3.connect(bundle) as conn:
        (sha, data) = conn.execute(
            "SELECT b.sha256, b.data FROM kernels k JOIN blobs b ON b.sha256 = k.sha256 "
            "WHERE k.backend = 'host' LIMIT 1"
        ).fetchone()
        big = bytes(data) + bytes(MAX_LOADED_BYTES + (6 << 20) - len(data))
        digest = hashlib.sha256(big).hexdigest()
        conn.execute("INSERT INTO blobs VALUES (?, ?, ?)", (digest, len(big), big))
        conn.execute("UPDATE kernels SET sha256 = ? WHERE sha256 = ?", (digest, sha))
        conn.execute("DELETE FROM blobs WHERE sha256 NOT IN (SELECT sha256 FROM kernels)")
        (rows,) = conn.execute(
            "SELECT count(*) FROM kernels WHERE sha256 = ?", (digest,)
        ).fetchone()
    conn.close()
    del big
    checked = warm("check", bundle)
    assert checked.returncode == 1 and "over the limit" in checked.stdout, checked.stdout[-1500:]
    verified = warm("verify", bundle)
    said = verified.stdout + verified.stderr
    assert verified.returncode == 1, said[-1500:]
    assert said.count("over the limit of") == rows and digest[:16] in said, said[-1500:]
    assert all(len(line) < 400 for line in said.splitlines()), said[-1500:]
    cleaned = warm("clean", "--dry-run", bundle)
    assert f"would remove {rows} kernel(s)" in cleaned.stdout, cleaned.stdout[-800:]
