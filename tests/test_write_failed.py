"""A write the system refuses other than for a full disk (a file size limit, here
RLIMIT_FSIZE as `ulimit -f` sets it; a quota or a failing disk alike) is one line that
says a write failed and that the bundle is unchanged, never "corrupt bundle (disk I/O
error)" (what it said, naming the merge's temporary file). The real CLI in a subprocess
under a real limit; the bundle is checked by `warm verify` afterwards.
"""

from __future__ import annotations

import hashlib
import resource
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import EXAMPLES, ROOT, Warm
from forked_cli import forked_made  # noqa: F401  (conftest's `made`, commands forked)

LIMIT = 200 * 1024  # bytes any file the command writes may reach


def _limited(warm: Warm, *args: str | Path) -> subprocess.CompletedProcess[str]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))

    return subprocess.run(
        [sys.executable, "-m", "warmcli", *map(str, args)],
        capture_output=True,
        text=True,
        env=warm.env,
        timeout=300,
        cwd=ROOT,
        preexec_fn=limit,
    )


def _one_line(proc: subprocess.CompletedProcess[str], *needles: str) -> str:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("warm: error: "), proc.stderr
    line = lines[0]
    assert "corrupt" not in line and ".merge" not in line, line
    for needle in needles:
        assert needle in line, line
    return line


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_run_past_a_file_size_limit_says_the_write_failed(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    bundle = tmp_path / "app.warm"
    shutil.copyfile(good, bundle)
    before = _digest(bundle)
    proc = _limited(warm, "run", EXAMPLES / "many_kernels_host.py", "--bundle", bundle, "-q")
    _one_line(proc, str(bundle), "a write to the disk failed", "the bundle is unchanged")
    assert warm("verify", bundle, "-q").returncode == 0
    assert _digest(bundle) == before


def test_a_merge_past_a_file_size_limit_says_the_write_failed(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    warm, good = made
    out = tmp_path / "out.warm"
    proc = _limited(warm, "merge", good, "-o", out)
    _one_line(proc, str(out), "a write to the disk failed", "nothing was merged")
    assert not list(tmp_path.iterdir())  # no temporary file, nor a lock of the OUT not made
