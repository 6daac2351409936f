"""Review of the hostile-bundle trial (round 29): the journal beside a bundle, judged at open.

`check_journal` runs at every open of a bundle, a production process's too: a read-only
open with no journal beside the bundle looks for one once (`recover` is not asked again).
A journal SQLite legitimately leaves (its header zeroed after a commit in PERSIST mode,
truncated to nothing) opens as before; one that is no regular file (a link to a FIFO or a
device) is refused without being opened (opening a device acts), and a huge sparse one is
judged by its last bytes. Every case uses a real SQLite file.
"""

from __future__ import annotations

import os
import sqlite3
import sys
from pathlib import Path

import pytest

from warmcli.bundle.store import Bundle, BundleError


def test_a_read_only_open_with_no_journal_looks_for_one_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = tmp_path / "b.warm"
    Bundle.create(bundle).close()
    looked: list[str] = []
    for name in ("open", "stat", "lstat", "access"):
        real = getattr(os, name)

        def spy(path: object, *args: object, _real: object = real, **kwargs: object) -> object:
            if os.fspath(path).endswith("-journal"):  # type: ignore[call-overload]
                looked.append(os.fspath(path))  # type: ignore[call-overload]
            return _real(path, *args, **kwargs)  # type: ignore[operator]

        monkeypatch.setattr(os, name, spy)
    Bundle.open(bundle).close()
    monkeypatch.undo()
    assert looked == [f"{bundle}-journal"]  # once: the production open path pays no more


@pytest.mark.parametrize("mode", ["PERSIST", "TRUNCATE"])
def test_a_journal_sqlite_leaves_after_a_commit_opens_as_before(tmp_path: Path, mode: str) -> None:
    bundle = tmp_path / "b.warm"
    Bundle.create(bundle).close()
    conn = sqlite3.connect(bundle, isolation_level=None)
    conn.execute(f"PRAGMA journal_mode = {mode}")
    conn.execute("INSERT INTO manifest VALUES ('note', 'kept')")
    conn.close()
    assert Path(f"{bundle}-journal").exists()
    for write in (False, True):
        with Bundle.open(bundle, write=write) as opened:
            assert opened.manifest()["note"] == "kept"


OPENED: list[str] = []  # what was opened while a test listens (`listening`)
LISTENING: list[bool] = []
HOOKED: list[bool] = []


def _listen(event: str, args: tuple[object, ...]) -> None:
    if event == "open" and LISTENING and isinstance(args[0], str):
        OPENED.append(args[0])


def listening() -> None:
    """Start recording opens (the audit hook, which cannot be removed, added once)."""
    if not HOOKED:
        sys.addaudithook(_listen)
        HOOKED.append(True)
    OPENED.clear()
    LISTENING.append(True)


def test_a_journal_that_is_no_regular_file_is_refused_without_being_opened(
    tmp_path: Path,
) -> None:
    """Opening a device has effects of its own (a tape rewinds, a watchdog is armed, a tty
    becomes the process's terminal): a journal linking to one is judged by `stat` alone."""
    bundle = tmp_path / "b.warm"
    Bundle.create(bundle).close()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    os.symlink(fifo, f"{bundle}-journal")
    listening()
    try:
        with pytest.raises(BundleError, match=r"is a symbolic link|is not a regular file"):
            Bundle.open(bundle)
    finally:
        LISTENING.clear()
    assert f"{bundle}-journal" not in OPENED and str(fifo) not in OPENED


@pytest.mark.parametrize("target", ["/dev/zero", "sparse"])
def test_a_journal_linking_to_an_endless_or_huge_file_is_judged_by_its_tail(
    tmp_path: Path, target: str
) -> None:
    bundle = tmp_path / "b.warm"
    Bundle.create(bundle).close()
    journal = Path(f"{bundle}-journal")
    if target == "sparse":
        with open(journal, "wb") as huge:
            huge.truncate(1 << 33)  # 8 GiB of nothing: its last 16 bytes read, no more
        with Bundle.open(bundle) as opened:
            assert opened.manifest()["format_version"]
    else:
        journal.symlink_to(target)
        with pytest.raises(BundleError, match=r"is a symbolic link|is not a regular file"):
            Bundle.open(bundle)
