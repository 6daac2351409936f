"""`warm stats --json` reads the tunes of a large bundle in several processes: the lines
are the ones one process writes, in the same order (tunes of equal operation and shape
included), and a corrupt row stops the listing where one process would stop it."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.big_bundle import build_big
from warmcli.bundle import listing
from warmcli.bundle.store import Bundle
from warmcli.cli.render.tune_line import LINES_APART, tune_line, tune_lines
from warmcli.errors import BundleError
from warmcli.records import tune_key

OTHER = "cuda|NVIDIA A100|sm_80|550.54"


@pytest.fixture()
def big(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = build_big(tmp_path / "big.warm", kernels=4, tunes=400)
    with sqlite3.connect(path) as conn:  # the same operation and shape on another device
        rows = conn.execute("SELECT * FROM tunes WHERE rowid % 3 = 0").fetchall()
        for row in rows:  # format 3 stores a key and a checksum as their bytes
            checksum = row[4].hex() if isinstance(row[4], bytes) else row[4]
            key: object = tune_key(row[1], row[2], OTHER, checksum)
            if isinstance(row[0], bytes):
                key = bytes.fromhex(str(key))
            conn.execute(
                f"INSERT INTO tunes VALUES (?, ?, ?, ?{', ?' * 7})",
                (key, *row[1:3], OTHER, *row[4:]),
            )
    conn.close()
    monkeypatch.setattr(listing, "PARALLEL_TUNES", 1)
    monkeypatch.setattr(listing, "RANGE_TUNES", 7)
    monkeypatch.setattr(listing, "worker_count", lambda: 3)
    return path


def _one_process(path: Path) -> Iterator[str]:
    with Bundle.open(path) as bundle:
        yield from map(tune_line, bundle.each_tune())


def _several(path: Path) -> Iterator[Any]:
    with Bundle.open(path) as bundle:
        texts = listing.converted_tunes(bundle, tune_lines)  # a range's lines as one text
        assert texts is not None
        for text in texts:
            yield from text.split(LINES_APART)


@pytest.mark.parametrize("range_tunes", [7, 10, 30])  # operations split, both, grouped
def test_several_processes_list_as_one(
    big: Path, monkeypatch: pytest.MonkeyPatch, range_tunes: int
) -> None:
    monkeypatch.setattr(listing, "RANGE_TUNES", range_tunes)
    here, read = os.getpid(), listing._between

    def elsewhere(*args: Any) -> Any:
        assert os.getpid() != here, "a range was read by the caller, not a worker"
        return read(*args)

    monkeypatch.setattr(listing, "_between", elsewhere)
    expected = list(_one_process(big))
    assert len(expected) == 400 + 133
    assert list(_several(big)) == expected


def test_a_corrupt_row_stops_both_at_the_same_line(big: Path) -> None:
    with sqlite3.connect(big) as conn:
        conn.execute("UPDATE tunes SET candidates = x'07' WHERE rowid = 200")
    conn.close()
    got: dict[str, list[str]] = {}
    for name, lines in (("one", _one_process(big)), ("several", _several(big))):
        got[name] = []
        with pytest.raises(BundleError) as raised:
            for line in lines:
                got[name].append(line)
        got[name].append(str(raised.value))
    assert got["several"] == got["one"] and 0 < len(got["one"]) < 533


def _fails(*_: object) -> None:
    raise OSError("a worker that fails")


def test_a_range_no_worker_read_is_read_here(big: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = list(_one_process(big))
    monkeypatch.setattr(listing, "_convert_range", _fails)
    assert list(_several(big)) == expected


def test_a_small_bundle_is_read_in_one_process(big: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(listing, "PARALLEL_TUNES", 10_000)
    with Bundle.open(big) as bundle:
        assert listing.converted_tunes(bundle, tune_lines) is None
