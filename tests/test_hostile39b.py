"""Three holes hostile39 found, each reproduced for real: a CUDA cubin row whose blob is a
cubin cut short (or a header whose tables lie past its end), which `warm verify` judged by
its ELF header alone; a host blob over the 64 MB warm loads, which `warm verify` skipped;
and a keyed reader's seeded copy, which took the old shared folder's copy whatever its size.
Real parts only: the CLI in subprocesses, NVRTC for `--arch sm_90` (no GPU), the system cc,
real SQLite files.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLES, ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_fleet36 import S3Like, s3_like  # noqa: F401  (the fixture)
from test_hostile39 import _plain_copy
from test_leftovers39 import SERVE, SMALL, cuda_small, signed_small  # noqa: F401  (the fixtures)

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
    table = " ".join(checked.stdout.split())  # (its table wraps by the path's length)
    assert checked.returncode == 1 and "over the limit" in table, checked.stdout[-1500:]
    verified = warm("verify", bundle)
    said = verified.stdout + verified.stderr
    assert verified.returncode == 1, said[-1500:]
    assert all(len(line) < 400 for line in said.splitlines()), said[-1500:]
    said = " ".join(said.split())  # (a line may wrap by the path's length)
    assert said.count("over the limit of") == rows and digest[:16] in said, said[-1500:]
    cleaned = warm("clean", "--dry-run", bundle)
    assert f"would remove {rows} kernel(s)" in cleaned.stdout, cleaned.stdout[-800:]


# A production start (strict) whose failure is printed, then the bytes its process read.
PROBE = (
    "try:\n"
    + "".join(f"    {line}\n" for line in SERVE.strip().splitlines())
    + "except Exception as exc:\n    print(type(exc).__name__)\n"
    + "with open('/proc/self/io') as io:\n"
    + "    print(next(int(line.split()[1]) for line in io if line.startswith('rchar:')))\n"
)


def _keyed_start(machine: dict[str, str], key: Path, url: str, limit: str) -> tuple[str, int]:
    """A keyed strict production start under WARM_REMOTE_MAX_SIZE=`limit`: what it printed
    (`0 0` served, else its error's name) and the bytes its process read."""
    env = dict(machine, WARM_BUNDLE=url, WARM_STRICT="1", WARM_TRUSTED_KEYS=f"{key}.pub")
    env = dict(env, WARM_REMOTE_MAX_SIZE=limit, **SMALL)
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-800:]
    said, read = done.stdout.rsplit("\n", 2)[:2]
    return said, int(read)


def test_a_seeded_copy_is_bounded_as_a_download_is(
    warm: Warm,
    tmp_path: Path,
    signed_small: tuple[Path, Path, Path],  # noqa: F811
    s3_like: tuple[S3Like, str],  # noqa: F811
) -> None:
    """A keyed reader's first fetch seeds its copy from the old shared folder's: that copy
    was taken whatever its size, though a download may take at most WARM_REMOTE_MAX_SIZE
    bytes (a store sending more is refused): a copy over the limit was served, and a user's
    own sparse file there, its size and time matching its meta.json, was read and written
    whole before its sha256 refused it. The limit is a download's now: such a copy is never
    taken, and never read."""
    key, bundle, _ = signed_small
    machine, url, plain = _plain_copy(warm, tmp_path, bundle, s3_like)
    held, _ = s3_like
    del held.files["/h39.warm"]  # the store fails: only a seeded copy could be served
    said, _ = _keyed_start(machine, key, url, str(bundle.stat().st_size - 1))
    assert said == "RemoteError", said  # as with no copy: none taken
    assert not list((tmp_path / "machine" / "remote").glob("*-*/bundle.warm"))
    copy, meta = plain / "bundle.warm", plain / "meta.json"
    with open(copy, "r+b") as grown:  # sparse: no disk taken
        grown.truncate(300 << 20)
    doc = json.loads(meta.read_text())
    st = copy.stat()
    doc["copy"] = f"{st.st_size}:{st.st_mtime_ns}"
    meta.write_text(json.dumps(doc))  # the user's own file: its mode kept
    said, read = _keyed_start(machine, key, url, "1M")
    assert said == "RemoteError" and read < (100 << 20), (said, read)
