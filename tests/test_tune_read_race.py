"""A tune read while another process deletes it (and the interned kernel keys only it
named): the row and its kernel ids are read in one snapshot, so the reader gets the
whole tune or none, never a "corrupt entry". Real bundle files, a real second process."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_unused_kernel_ids import K, _tune

from warmcli.bundle import rows
from warmcli.bundle.store import Bundle


def test_a_tune_deleted_between_its_row_and_its_kernel_ids_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "b.warm"
    tune = _tune("s0", "host|elsewhere", [K[0], K[1]])
    with Bundle.create(path) as bundle:
        bundle.put(tunes=[tune, _tune("s1", "host|elsewhere", [K[2], K[3]])])
    opened = tmp_path / "opened"  # the writer's bundle open, its delete next
    delete = (
        "from pathlib import Path\n"
        "from warmcli.bundle.store import Bundle\n"
        f"b = Bundle.open({str(path)!r}, write=True)\n"
        f"Path({str(opened)!r}).touch()\n"
        f"b.delete(tune_keys=[{tune.key!r}])\n"
        "b.close()\n"
    )
    writers: list[subprocess.Popen[bytes]] = []
    read = rows.RowReader._read_kernel_key

    def racing(self: rows.RowReader, kernel_id: int) -> str:
        if not writers:  # the writer commits between the reader's statements, if it can
            writers.append(subprocess.Popen([sys.executable, "-c", delete]))
            deadline = time.monotonic() + 60  # (its start: a fresh interpreter, under load)
            while writers[0].poll() is None and not opened.exists():
                assert time.monotonic() < deadline, "the writer never opened the bundle"
                time.sleep(0.01)
            deadline = time.monotonic() + 1  # a delete of two rows, if nothing holds it
            while writers[0].poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
        return read(self, kernel_id)

    monkeypatch.setattr(rows.RowReader, "_read_kernel_key", racing)
    with Bundle.open(path) as reader:
        assert reader.tune(tune.key) == tune  # as it was when the read began
    assert writers[0].wait(timeout=60) == 0  # and the delete went through after it
    with Bundle.open(path) as reader:
        assert reader.tune(tune.key) is None
