"""Stop 39's hostile bundles and stores against the day's new code: the old shared cache
folder a keyed reader's first fetch seeds its copy from (`warmcli.bundle.remote_seed`), and
what a fetch remembers beside a copy (`received.read_meta`). What broke is kept here: each
command and production start ends, exits 0 or says one line, and serves what the store holds.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)
from test_fleet36 import S3Like, s3_like  # noqa: F401  (the fixture)
from test_hostile37 import one_line_or_ok, peak_of
from test_leftovers39 import (  # noqa: F401  (the fixtures)
    SERVE,
    SMALL,
    _serve,
    cuda_small,
    signed_small,
)

from warmcli.bundle.blobs import MAX_LOADED_BYTES


def _plain_copy(
    warm: Warm,
    tmp_path: Path,
    bundle: Path,
    s3_like: tuple[S3Like, str],  # noqa: F811
) -> tuple[dict[str, str], str, Path]:
    """A machine whose keyless reader fetched `bundle` from the store: its env, the URL and
    the shared cache folder (`WARM_HOME/remote/<hash of the URL>/`) that keyed readers seed
    their first copy from."""
    held, base = s3_like
    url = f"{base}/h39.warm"
    held.files["/h39.warm"] = bundle.read_bytes()
    machine = dict(warm.env, WARM_HOME=str(tmp_path / "machine"))
    assert _serve(machine, url).returncode == 0
    (plain,) = [p for p in (tmp_path / "machine" / "remote").iterdir() if p.is_dir()]
    return machine, url, plain


def test_a_fifo_as_the_old_shared_copy_never_holds_a_keyed_start(
    warm: Warm,
    tmp_path: Path,
    signed_small: tuple[Path, Path, Path],  # noqa: F811
    s3_like: tuple[S3Like, str],  # noqa: F811
) -> None:
    """A keyed reader's first fetch opens the old shared folder's `bundle.warm` to seed its
    own copy: a FIFO there (O_NOFOLLOW lets one open) blocked that open for good, under the
    keyed folder's lock: production never started, and every other keyed process waited
    for the lock. It is opened without blocking now, and taken for no copy: the store's is
    downloaded and served."""
    key, bundle, _ = signed_small
    machine, url, plain = _plain_copy(warm, tmp_path, bundle, s3_like)
    (plain / "bundle.warm").unlink()
    os.mkfifo(plain / "bundle.warm", 0o600)
    env = dict(machine, WARM_BUNDLE=url, WARM_STRICT="1", WARM_TRUSTED_KEYS=f"{key}.pub")
    try:
        started = subprocess.run(
            [sys.executable, "-c", SERVE],
            capture_output=True,
            text=True,
            env=dict(env, **SMALL),
            cwd=ROOT,
            timeout=30,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("a keyed start hung opening a FIFO in the old cache folder") from None
    assert started.returncode == 0 and started.stdout == "0 0\n", started.stderr[-800:]


def test_a_remembered_record_nested_deep_or_huge_is_forgotten_not_a_traceback(
    warm: Warm,
    tmp_path: Path,
    signed_small: tuple[Path, Path, Path],  # noqa: F811
    s3_like: tuple[S3Like, str],  # noqa: F811
) -> None:
    """What a fetch remembers beside a copy (`meta.json`) was read whole and parsed with
    `json.loads`, catching only OSError and ValueError: one nested 50,000 deep raised
    RecursionError, a traceback from `warm stats URL` and from a keyed production start
    (whose first fetch reads the old shared folder's record to seed its copy); one of 2 GiB
    was read whole (MemoryError under a 1.5 GiB limit). Such a record is believed in
    nothing now (the copy is downloaded afresh): each ends well, memory bounded."""
    key, bundle, _ = signed_small
    machine, url, plain = _plain_copy(warm, tmp_path, bundle, s3_like)
    deep = "[" * 50_000  # under MAX_META_BYTES (64 KiB): parsed, and too deep for json
    (plain / "meta.json").write_text(deep)
    stats = Warm(machine)("stats", url)
    assert stats.returncode == 0 and "Traceback" not in stats.stderr, stats.stderr[-800:]
    (plain / "meta.json").write_text(deep)
    keyed = _serve(dict(machine, WARM_TRUSTED_KEYS=f"{key}.pub"), url)
    assert keyed.returncode == 0 and keyed.stdout == "0 0\n", keyed.stderr[-800:]
    with open(plain / "meta.json", "wb") as huge:  # sparse: no disk, 2 GiB to read
        huge.truncate(2 << 30)
    argv = [sys.executable, "-m", "warmcli", "stats", url]
    code, _, err, peak = peak_of(argv, machine)
    one_line_or_ok(argv, code, err)
    assert code == 0 and peak < 400_000, (code, peak, err[-800:])


def test_verify_names_ptx_in_a_cubin_row_however_large_its_blob(
    warm: Warm,
    tmp_path: Path,
    cuda_small: Path,  # noqa: F811
) -> None:
    """`warm verify` tells a CUDA blob's kind by its first 4,096 bytes and confirmed a wrong
    kind by reading the blob whole (`Bundle.blob`): one over the 64 MB warm loads could not
    be read so, and was taken as a blob 'named by other checks', though none names it: a
    bundle whose sm_90 cubin rows hold PTX padded past that size was 'sound' (exit 0) and
    `warm clean` kept those rows, while `warm check --arch sm_90` calls them unusable. The
    wrong kind is confirmed by the blob's sha256 read a chunk at a time now: named, removed."""
    bundle = tmp_path / "big.warm"
    shutil.copyfile(cuda_small, bundle)
    with sqlite3.connect(bundle) as conn:
        (ptx,) = conn.execute(
            "SELECT b.data FROM kernels k JOIN blobs b ON b.sha256 = k.sha256 "
            "WHERE k.arch = 'compute_90' LIMIT 1"
        ).fetchone()
        big = bytes(ptx) + b"\n//" + b"x" * (MAX_LOADED_BYTES + 1)
        sha = hashlib.sha256(big).hexdigest()
        conn.execute("INSERT INTO blobs VALUES (?, ?, ?)", (sha, len(big), big))
        conn.execute("UPDATE kernels SET sha256 = ? WHERE arch = 'sm_90'", (sha,))
        conn.execute("DELETE FROM blobs WHERE sha256 NOT IN (SELECT sha256 FROM kernels)")
    conn.close()
    verified = warm("verify", bundle)
    assert verified.returncode == 1, verified.stdout[-800:] + verified.stderr[-800:]
    assert "PTX, not a cubin for sm_90" in verified.stdout + verified.stderr, verified.stdout
    cleaned = warm("clean", "--dry-run", bundle)
    assert cleaned.returncode == 0, cleaned.stderr[-800:]
    assert "would remove 8 kernel(s)" in cleaned.stdout, cleaned.stdout[-800:]


def test_a_strict_miss_quotes_a_bundles_long_shape_cut(
    warm: Warm,
    tmp_path: Path,
    signed_small: tuple[Path, Path, Path],  # noqa: F811
) -> None:
    """A tune missed under `WARM_STRICT=1` is explained by the nearest shapes the bundle
    holds: `StrictMissError` quoted a bundle's shape text whole, so one of 1,000,000
    characters (`[[[[...`, within the 4 MB a key holds) made a one-megabyte error line in
    every production log (`WARM_STRICT=warn` and the miss log cut it at 4,096 characters).
    It is cut as they cut it now."""
    from warmcli.records import tune_key

    _, _, unsigned = signed_small
    bundle = tmp_path / "long.warm"
    shutil.copyfile(unsigned, bundle)
    with sqlite3.connect(bundle) as conn:
        row = list(conn.execute("SELECT * FROM tunes").fetchone())
        long = "[" * 1_000_000
        row[0] = bytes.fromhex(tune_key(row[1], long, row[3], bytes(row[4]).hex()))
        row[2] = long
        conn.execute("DELETE FROM tunes")
        conn.execute(f"INSERT INTO tunes VALUES ({', '.join('?' * len(row))})", row)
    conn.close()
    env = dict(warm.env, WARM_BUNDLE=str(bundle), WARM_STRICT="1", **SMALL)
    served = subprocess.run(
        [sys.executable, "-c", SERVE], capture_output=True, text=True, env=env, cwd=ROOT
    )
    assert served.returncode != 0 and "StrictMissError" in served.stderr, served.stderr[-800:]
    assert "shape: bundle has [[[[" in served.stderr, served.stderr[-800:]
    assert len(served.stderr) < 10_000, len(served.stderr)
