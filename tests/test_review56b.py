"""Review 56b: hostile bundles (rows of a real host bundle edited with sqlite3) against the
commands and the serving process, through the real CLI in a subprocess (conftest's `warm`).
Each test here failed before its fix."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from conftest import Warm


def _pointed_at_another_kernels_blob(path: Path) -> str:
    """Points one kernel row of the bundle at `path` at another blob of that bundle (one that
    holds other kernels, not its symbol), as a hostile or damaged bundle may; its key."""
    with sqlite3.connect(path) as conn:
        key, sha = conn.execute("SELECT key, sha256 FROM kernels ORDER BY key LIMIT 1").fetchone()
        other = conn.execute("SELECT sha256 FROM blobs WHERE sha256 != ?", (sha,)).fetchone()
        assert other is not None, "the example's bundle holds two blobs"
        conn.execute("UPDATE kernels SET sha256 = ? WHERE key = ?", (other[0], key))
    conn.close()
    return str(key)


def test_merge_takes_the_build_that_exports_its_symbol_over_a_first_inputs_that_does_not(
    warm: Warm, tmp_path: Path, host_bundle: Callable[[Path], Path]
) -> None:
    # A first input's kernel row naming another kernel's blob (sound, its sha256 right, but
    # without the row's symbol: never served, `warm verify` calls it corrupt) was kept over
    # the second input's sound build of the same key ('kept the binary ... dropped ...'):
    # merge exited 0 writing a bundle `warm verify` failed (exit 1) and production missed,
    # though an input held a build it serves. Now that build is taken, and said so.
    bad, good = host_bundle(tmp_path / "bad.warm"), host_bundle(tmp_path / "good.warm")
    key = _pointed_at_another_kernels_blob(bad)
    out = tmp_path / "out.warm"
    merged = warm("merge", "-o", out, bad, good)
    assert merged.returncode == 0, merged.stderr
    said = " ".join(merged.stdout.split())  # (a long path wraps its line)
    assert f"kernel {key[:16]}: the binary" in said
    assert "does not export" in said
    verified = warm("verify", out)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    with sqlite3.connect(out) as conn:  # the kernel counts add up: one row a key
        assert conn.execute("SELECT count(*) FROM kernels").fetchone() == (6,)
    conn.close()
    assert f"from {bad}: 5 kernel(s)" in said
    assert f"from {good}: 1 kernel(s)" in said
