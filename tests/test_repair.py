"""A damaged bundle can be repaired: the real CLI in a subprocess over a real bundle with
one blob overwritten (`warm run` rebuilds what it reaches, `warm clean` removes the rest)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

from conftest import EXAMPLES, Warm, nvcc_or_skip
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

MATMUL = EXAMPLES / "matmul_host.py"


def corrupt_one_blob(path: Path) -> str:
    conn = sqlite3.connect(path)
    sha = conn.execute("SELECT sha256 FROM blobs ORDER BY sha256 LIMIT 1").fetchone()[0]
    conn.execute("UPDATE blobs SET data = CAST('tampered' AS BLOB) WHERE sha256 = ?", (sha,))
    conn.commit()
    conn.close()
    return str(sha)


def test_run_repairs_a_corrupt_blob_so_verify_passes(
    warm: Warm, bundle_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    host_bundle(bundle_path)  # as `warm run MATMUL --bundle bundle_path` makes it
    sha = corrupt_one_blob(bundle_path)
    broken = warm("verify", bundle_path)
    assert broken.returncode == 1 and f"blob {sha[:16]} does not match" in broken.stdout
    rerun = warm("run", MATMUL, "--bundle", bundle_path)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "whose blob failed its sha256 (rebuilt where the workload launches them)" in rerun.stdout
    fixed = warm("verify", bundle_path, "-w", MATMUL)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr


def test_clean_removes_corrupt_entries_and_lists_what_it_kept(
    warm: Warm, bundle_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    host_bundle(bundle_path)  # as `warm run MATMUL --bundle bundle_path` makes it
    sha = corrupt_one_blob(bundle_path)
    users = (
        sqlite3.connect(bundle_path)
        .execute("SELECT count(*) FROM kernels WHERE sha256 = ?", (sha,))
        .fetchone()[0]
    )
    proc = warm("clean", bundle_path, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    corrupt = [r for r in doc["removed"] if r["reason"].startswith("corrupt")]
    assert len(corrupt) == users > 0
    assert warm("verify", bundle_path).returncode == 0


def test_clean_lists_pending_tunes_as_kept_unjudged(
    warm: Warm, bundle_path: Path, workload_file
) -> None:
    nvcc_or_skip()
    run = warm("run", EXAMPLES / "saxpy_cuda.py", "--arch", "sm_90", "--bundle", bundle_path,
               "--no-verify")  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    doc = warm.json("clean", bundle_path, "--dry-run")
    assert any("pending tunes" in line for line in doc["kept_unjudged"]), doc
    assert doc["removed"] == []
