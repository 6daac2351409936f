"""review43h: hostile review of fuzz43's `-wal`/`-shm` checks.

- A `-shm` hard-linked to another of the user's files, with a `-wal`, planted beside a bundle
  AFTER a process opened it: SQLite opens a `-wal` it finds at the start of every read
  transaction (whatever the header says), and rewrote the other file at the next read
  (40,000 bytes truncated to 32 KiB); fuzz43 judged them only at open. A read of a bundle
  open since (read-only, and a writer's) now refuses it in one line, the file untouched.
- speed43b's test_disk40 re-warm (400 small kernels under 450 KiB) passed with the fix it
  guards (9cca030, `file.rolled_back`'s read) removed: its transaction fits SQLite's page
  cache, fails at commit, and SQLite rolls that back itself. A re-warm whose pages spill
  the cache mid-transaction restores the assertion (a `-journal` was left without the fix).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, Warm
from full_disk import limited, one_line

from warmcli.bundle.store import Bundle
from warmcli.errors import BundleError


@pytest.mark.parametrize("write", [False, True])
def test_a_shm_link_planted_after_the_open_is_never_written(
    made: tuple[Warm, Path], tmp_path: Path, write: bool
) -> None:
    _, good = made
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(good.read_bytes())
    opened = Bundle.open(bundle, write=write)
    try:
        keys = [k.key for k in opened.kernels()]
        assert keys
        precious = tmp_path / "precious.bin"
        data = os.urandom(40_000)
        precious.write_bytes(data)
        os.link(precious, f"{bundle}-shm")
        Path(f"{bundle}-wal").write_bytes(os.urandom(100))
        with pytest.raises(BundleError, match=r"b\.warm-shm is a hard link"):
            opened.kernel(keys[0])
        assert precious.read_bytes() == data
    finally:
        opened.close()
    assert precious.read_bytes() == data


BIG_KERNELS = r'''
import os
import subprocess
import sys
from warmcli import Kernel

SOURCE = """
const unsigned char TABLE[80000] = {ID};
void big(float *x, int n) { for (int j = 0; j < n; j++) x[j] += (float)TABLE[j % 80000]; }
"""
KERNELS = [
    Kernel(SOURCE, "big", "Pi", defines={"ID": i + 1}, name=f"big{i}")
    for i in range(int(os.environ["BIG_KERNELS"]))
]


def workload(rt):
    x = rt.buffer(64, "float32")
    for kernel in KERNELS:
        rt.launch(kernel, x, 64)
'''


def test_a_write_the_disk_refuses_past_sqlites_cache_leaves_no_journal(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """speed43b made test_disk40's re-warm 400 small kernels (~0.5 MB): a transaction that
    fits SQLite's page cache (2 MB) fails at its commit, which SQLite rolls back itself, so
    the test passed with `file.rolled_back`'s read (9cca030) removed. 40 kernels of some
    80 KB each (80 of 40 KB took twice the compiles; 20 of 160 KB passed with that read
    removed) spill the cache mid-transaction, where SQLite stops in its error state."""
    warm = Warm(dict(made[0].env))
    folder = tmp_path / "d"
    folder.mkdir()
    bundle, workload = folder / "b.warm", tmp_path / "big.py"
    workload.write_text(BIG_KERNELS)
    first = Warm(dict(warm.env, BIG_KERNELS="2"))("run", workload, "-b", bundle, "-q")
    assert first.returncode == 0, first.stderr
    before = bundle.read_bytes()
    limit = len(before) + 1_500_000
    proc = limited(warm, limit, "run", workload, "-b", bundle, "-q", env={"BIG_KERNELS": "40"})
    line = one_line(proc)
    assert "nothing was written, the bundle is unchanged" in line, line
    assert sorted(p.name for p in folder.iterdir()) == ["b.warm", "b.warm.lock"]
    assert bundle.read_bytes() == before


LATE_FIFO = """
import os, sys
from warmcli.bundle.store import Bundle
from warmcli.errors import BundleError

bundle = Bundle.open(sys.argv[1])
key = [k.key for k in bundle.kernels()][0]
os.mkfifo(sys.argv[1] + "-journal")
try:
    bundle.kernel(key)
except BundleError as exc:
    print("refused:", exc)
"""


def test_a_fifo_journal_planted_after_the_open_never_hangs_a_reader(
    made: tuple[Warm, Path], tmp_path: Path
) -> None:
    """A FIFO planted as the `-journal` of a bundle a process had open read-only: SQLite's
    look for a hot journal at its next read opened the FIFO, which never returned (the
    process hung for good, Ctrl-C unheard). Now the read is refused in one line."""
    _, good = made
    bundle = tmp_path / "b.warm"
    bundle.write_bytes(good.read_bytes())
    script = tmp_path / "late.py"
    script.write_text(LATE_FIFO)
    proc = subprocess.run(
        [sys.executable, str(script), str(bundle)],
        capture_output=True, text=True, timeout=30, cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "b.warm-journal is not a regular file" in proc.stdout, proc.stdout
