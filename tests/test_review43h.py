"""review43h: hostile review of fuzz43's `-wal`/`-shm` checks.

- A `-shm` hard-linked to another of the user's files, with a `-wal`, planted beside a bundle
  AFTER a process opened it: SQLite opens a `-wal` it finds at the start of every read
  transaction (whatever the header says), and rewrote the other file at the next read
  (40,000 bytes truncated to 32 KiB); fuzz43 judged them only at open. A read of a bundle
  open since (read-only, and a writer's) now refuses it in one line, the file untouched.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import Warm

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
