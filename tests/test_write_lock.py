"""The bundle's write lock (`warmcli.bundle.lock`) on real files in real processes: a file
system without `flock` (an LD_PRELOAD shim built with the system cc) and a forked child."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

_NO_FLOCK = "#include <errno.h>\nint flock(int fd, int op) { errno = ENOSYS; return -1; }\n"


def _no_flock_shim(tmp_path: Path) -> Path:
    cc = shutil.which("cc")
    if cc is None or not sys.platform.startswith("linux"):
        pytest.skip("needs the system cc on Linux to build an LD_PRELOAD shim")
    source = tmp_path / "noflock.c"
    source.write_text(_NO_FLOCK)
    shim = tmp_path / "noflock.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", shim, source], check=True)
    return shim


def _python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_a_file_system_without_flock_takes_the_lock_and_says_nothing(tmp_path: Path) -> None:
    shim = _no_flock_shim(tmp_path)
    bundle = tmp_path / "b.warm"
    code = f"""
        from pathlib import Path
        from warmcli.bundle.lock import write_lock
        for _ in range(2):  # taken, released, taken again
            with write_lock(Path({str(bundle)!r})):
                with write_lock(Path({str(bundle)!r})):  # the thread that holds it again
                    pass
        print("done")
    """
    first = _python(code, LD_PRELOAD=str(shim))
    assert (first.returncode, first.stdout, first.stderr) == (0, "done\n", "")
    again = _python(code, LD_PRELOAD=str(shim))  # a second writer after the first
    assert (again.returncode, again.stdout, again.stderr) == (0, "done\n", "")
