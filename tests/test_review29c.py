"""Review of the hostile-bundle trial (round 29): the journal beside a bundle, judged at open.

`check_journal` runs at every open of a bundle, a production process's too: a read-only
open with no journal beside the bundle looks for one once (`recover` is not asked again).
A journal SQLite legitimately leaves (empty, its header zeroed after a commit in PERSIST
mode, truncated) opens as before.
Every case uses a real SQLite file.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from warmcli.bundle.store import Bundle


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
