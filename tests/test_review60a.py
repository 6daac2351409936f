"""Hostile review of stop 60's trust work (trust60's merge and the small fixes beside it):
faults found through another door than the one fixed, each shown by a test that failed
before its fix. Real bundles made by the host example and signed by `warm keygen`'s keys,
the real CLI in subprocesses, the system C compiler; no timings."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm

import warmcli.bundle.signed as signed_module
from warmcli.bundle.signature_report import signature_report
from warmcli.bundle.signing import load_public_key
from warmcli.bundle.store import Bundle


def test_a_signature_row_without_a_key_id_never_has_its_long_list_read(
    made: tuple[Warm, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signatures' lists are read within `MAX_BLOB_BYTES` all together, shortest first,
    ties broken by key id: a row whose key id is NULL (its `TEXT PRIMARY KEY` lets SQLite
    store one) compared as unknown with itself, so its own list was left out of its sum and
    a list of any length was read whole beside a short one (70,000 bytes past a limit of
    65,536 here; a gigabyte in a bundle made to cost memory). It is read as none now, as any
    list past the limit. (The limit is made small: no test writes a bundle over 256 MiB.)"""
    warm, good = made
    bundle = shutil.copyfile(good, tmp_path / "b.warm")
    assert warm("keygen", tmp_path / "ci").returncode == 0
    assert warm("sign", bundle, "--key", tmp_path / "ci").returncode == 0
    with sqlite3.connect(bundle) as conn:  # two lists over the limit, no key id to either
        for _ in range(2):
            conn.execute(
                "INSERT INTO signatures VALUES (NULL, zeroblob(32), zeroblob(64), "
                "zeroblob(70000), 1.0)"
            )
    conn.close()
    monkeypatch.setattr(signed_module, "MAX_BLOB_BYTES", 65536)
    read: list[int] = []  # the length of every list the signatures' select handed Python
    few = signed_module.SignedRows._few

    def counted(self: Any, select: str, most: int, what: str, params: Any = ()) -> Any:
        rows = few(self, select, most, what, params)
        if what == "signatures":
            read.extend(len(r[4]) for r in rows if r[4] is not None)
        return rows

    monkeypatch.setattr(signed_module.SignedRows, "_few", counted)
    with Bundle.open(bundle) as opened:
        report = signature_report(opened, [load_public_key(tmp_path / "ci.pub")])
    assert report.vouched and not report.uncovered, report
    assert read and max(read) <= 65536, read  # the trusted key's list alone
