"""trial57f: warm installed as users install it, its dependencies reached through a path on
`sys.path` that is not one of Python's site folders (`pip install --target DIR` with
`PYTHONPATH=DIR`, as containers and build tools lay them out). There warm's own search finds
NVRTC's library where cuda-bindings' loader does not look, and the first NVRTC call raised
cuda.pathfinder's DynamicLibNotFoundError through `warm clean` and `warm run --arch`: a
traceback, exit 1, not a clean error. Real CLI in a subprocess, real cuda-bindings, no mocks.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SITE = sysconfig.get_paths()["purelib"]
BASE = getattr(sys, "_base_executable", sys.executable)


def _nvrtc_in_site() -> bool:
    return any((Path(SITE) / "nvidia").glob("*/lib/libnvrtc.so*"))


@pytest.mark.skipif(
    sys.executable == BASE or not _nvrtc_in_site(),
    reason="needs a virtual environment holding NVRTC's wheel",
)
@pytest.mark.parametrize(
    "command",
    [
        ["clean", "--dry-run", "B"],
        ["run", str(ROOT / "examples/saxpy_cuda.py"), "--arch", "sm_90", "--bundle", "B"],
    ],
    ids=["clean", "run-arch"],
)
def test_nvrtc_on_pythonpath_only_is_one_line_never_a_traceback(
    tmp_path: Path, command: list[str]
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    environ = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "WARM_HOME": str(tmp_path / "home"),
        "PYTHONPATH": os.pathsep.join((str(ROOT), SITE)),  # (no site folder: not processed)
    }
    done = subprocess.run(
        [BASE, "-m", "warmcli", *[str(tmp_path / "b.warm") if a == "B" else a for a in command]],
        cwd=work,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode in (0, 2), done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()) <= 1, done.stderr[-2000:]  # (one-line error)
