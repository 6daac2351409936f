"""A full disk, a read-only disk: each refusal is one line and a non-zero exit, and the
bundle already stored is left byte for byte as it was, with no journal, `-wal` or
temporary file beside it. A full disk is `RLIMIT_FSIZE` here (`ulimit -f`, in the child:
SQLite meets EFBIG where a full tmpfs gives it ENOSPC, and leaves the same state), so the
tests run unprivileged; the real CLI in a subprocess, real SQLite files, the real C
compiler. The bundle's bytes and the folder's listing are looked at before any other warm
command opens the bundle (a read rolls a journal left behind back, and hides it).
"""

from __future__ import annotations

import hashlib
import resource
import subprocess
import sys
from pathlib import Path

from conftest import EXAMPLES, ROOT, Warm


def _limited(
    warm: Warm, limit: int, *args: str | Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`warm *args` with no file it writes allowed past `limit` bytes."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run(
        [sys.executable, "-m", "warmcli", *map(str, args)],
        capture_output=True, text=True, env=dict(warm.env, **(env or {})), timeout=300,
        cwd=ROOT, preexec_fn=cap,
    )  # fmt: skip


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warm: error: "), proc.stderr
    return lines[0]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_write_the_disk_refuses_mid_transaction_leaves_no_journal(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A re-warm whose transaction met a full disk (here a size limit) said "nothing was
    written, the bundle is unchanged" and left the bundle grown, with a hot `-journal`
    beside it: SQLite had stopped the transaction in its error state, and rolls such a
    journal back only at the connection's next read, which never came. Now the bundle is
    its old bytes and no journal is left at exit."""
    warm = Warm(dict(made[0].env))
    folder = tmp_path / "d"
    folder.mkdir()
    bundle = folder / "b.warm"
    workload = EXAMPLES / "many_kernels_host.py"
    warm.env["WARM_EXAMPLE_KERNELS"] = "40"
    assert warm("run", workload, "-b", bundle, "-q").returncode == 0
    before = _digest(bundle)
    env = {"WARM_EXAMPLE_KERNELS": "2000"}
    proc = _limited(warm, 900 * 1024, "run", workload, "-b", bundle, "-q", env=env)
    line = _one_line(proc)
    assert "nothing was written, the bundle is unchanged" in line, line
    assert sorted(p.name for p in folder.iterdir()) == ["b.warm", "b.warm.lock"]
    assert _digest(bundle) == before
