"""A bundle reached through a symbolic link is the file the link leads to: one write lock
(beside that file) for every writer, whichever name it was given, and a merge (or pull)
whose output is a link writes the file it leads to, keeping the link. Through the real
CLI in subprocesses, on real files (the `warm` fixture's commands each a fork of a process
that imported the CLI once, `tests/forked_cli.py`; the run that waits for the merge's lock
a started one).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/locks")

_KERNEL = """
from warmcli import Kernel
DEVICE = "host"
K = Kernel("void {name}(float *x, int n) {{ for (int i = 0; i < n; i++) x[i] += 1; }}",
           "{name}", "Pi")
def workload(rt):
    import numpy as np
    x = rt.upload(np.zeros(4, dtype=np.float32))
    rt.launch(K, x, 4)
"""


def _workload(folder: Path, name: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(_KERNEL.format(name=name))
    return path


def _entries(bundle: Path) -> set[str]:
    with sqlite3.connect(f"file:{bundle}?mode=ro", uri=True) as conn:
        return {row[0] for row in conn.execute("SELECT entry FROM kernels")}


def _waiting_on(lock: Path) -> bool:
    """Whether some process waits for the flock of `lock` (Linux's /proc/locks: `->`)."""
    inode = os.stat(lock).st_ino
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        at = fields.index("->") if "->" in fields else -1
        if at >= 0 and fields[at + 1] == "FLOCK" and fields[at + 5].endswith(f":{inode}"):
            return True
    return False


def test_a_run_through_a_link_waits_for_a_merge_of_the_file_and_keeps_its_kernel(
    warm: Warm, tmp_path: Path
) -> None:
    real, link = tmp_path / "real.warm", tmp_path / "link.warm"
    assert warm("run", _workload(tmp_path, "onek"), "-b", real, "-q").returncode == 0
    link.symlink_to(real.name)
    # A merge's part, in a process of its own: the write lock of real.warm taken by that
    # name, what it read then published over it by a rename when it is told to go on.
    merge = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import os, shutil, sys
                from pathlib import Path
                from warmcli.bundle.lock import write_lock
                with write_lock(Path({str(real)!r})):
                    shutil.copyfile({str(real)!r}, {str(real)!r} + ".next")
                    print("held", flush=True)
                    sys.stdin.readline()
                    os.replace({str(real)!r} + ".next", {str(real)!r})
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert merge.stdout is not None and merge.stdin is not None
    assert merge.stdout.readline() == "held\n"
    run = subprocess.Popen(
        [sys.executable, "-m", "warmcli", "run", _workload(tmp_path, "addk"), "-b", link, "-q"],
        env=warm.env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lock = tmp_path / "real.warm.lock"
    deadline = time.monotonic() + 120
    while run.poll() is None and not _waiting_on(lock) and time.monotonic() < deadline:
        time.sleep(0.05)
    merge.stdin.write("go\n")
    merge.stdin.close()
    assert merge.wait(timeout=30) == 0
    _, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    assert _entries(real) == {"onek", "addk"}  # the run's kernel is not lost to the rename
    assert not (tmp_path / "link.warm.lock").exists()


def test_merge_out_through_a_link_writes_the_file_it_leads_to(warm: Warm, tmp_path: Path) -> None:
    target, other = tmp_path / "data" / "t.warm", tmp_path / "o.warm"
    target.parent.mkdir()
    assert warm("run", _workload(tmp_path, "onek"), "-b", target, "-q").returncode == 0
    assert warm("run", _workload(tmp_path, "addk"), "-b", other, "-q").returncode == 0
    link = tmp_path / "l2.warm"
    link.symlink_to(target)
    done = warm("merge", link, other, "-o", link)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and link.resolve() == target
    assert _entries(target) == {"onek", "addk"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["data", "o.warm", "o.warm.lock", "l2.warm", "onek.py", "addk.py", "home"]
    )
    # --force over a link to another bundle: the link stays, its file is the union
    fresh = tmp_path / "f.warm"
    fresh.symlink_to(other)
    forced = warm("merge", target, "-o", fresh, "--force")
    assert forced.returncode == 0, forced.stderr
    assert fresh.is_symlink() and _entries(other) == {"onek", "addk"}
