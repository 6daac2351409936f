"""A full disk for the tests, unprivileged: `limited` runs the real CLI with no file it
writes allowed past a size (`RLIMIT_FSIZE`, `ulimit -f`: SQLite meets EFBIG where a full
tmpfs gives it ENOSPC, and leaves the same state); `one_line` is the one error line a
refused command must give (exit 2)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, Warm


def limited(
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


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one `warm: error:` line of a command that exited 2."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warm: error: "), proc.stderr
    return lines[0]
