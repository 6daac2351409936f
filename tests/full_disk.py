"""A full disk for the tests, unprivileged: `limited` runs the real CLI with no file it
writes allowed past a size (`RLIMIT_FSIZE`, `ulimit -f`: SQLite meets EFBIG where a full
tmpfs gives it ENOSPC, and leaves the same state); `one_line` is the one error line a
refused command must give (exit 2); `in_private_mount` runs a script that mounts a
small tmpfs (a real full disk) where the machine lets it."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest
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


def in_private_mount(
    script: str, env: dict[str, str], timeout: float = 120, cwd: Path | None = ROOT
) -> subprocess.CompletedProcess[str]:
    """`sh -c script` in a mount namespace of its own (what it mounts is gone after it), as
    root can; the test is skipped where nothing can be mounted (`unshare` fails, or the
    script exits 99, as each does where its `mount` fails)."""
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout,
    )  # fmt: skip
    if proc.returncode == 99 or "unshare failed" in proc.stderr:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    return proc
