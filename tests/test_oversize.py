"""A value longer than warm reads (over 16 MiB: SQLite refuses to load it, even for its
length) in a real bundle file: every listing and command that meets it fails naming the
entry that holds it (its key, column and size), never with SQLite's "too big" alone
(`warm verify` lists it among its problems)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from conftest import Warm
from forked_cli import forked_warm  # noqa: F401  (conftest's `warm`, commands forked)

from tests.big_bundle import build_big
from warmcli.bundle import listing
from warmcli.bundle.rows import MAX_VALUE_BYTES
from warmcli.bundle.store import Bundle
from warmcli.cli.render.tune_line import tune_lines
from warmcli.errors import BundleError

TOO_LONG = "x" * (MAX_VALUE_BYTES + 1)


def _hostile(tmp_path: Path, table: str, column: str) -> tuple[Path, str]:
    """A sound bundle whose third row of `table` holds `TOO_LONG` in `column`; that row's
    key as a listing names it (16 hex digits)."""
    path = build_big(tmp_path / "hostile.warm", kernels=6, tunes=300)  # `stats` sums it up
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = 3", (TOO_LONG,))
        (key,) = conn.execute(f"SELECT lower(hex(key)) FROM {table} WHERE rowid = 3").fetchone()
    conn.close()
    if table == "kernels":  # kernels hold their key as hex text
        key = bytes.fromhex(key).decode()
    return path, key[:16]


@pytest.mark.parametrize(
    ("table", "column", "what"),
    [
        ("tunes", "shape_key", "tune"),
        ("tunes", "operation", "tune"),
        ("kernels", "label", "kernel"),
    ],
)
def test_a_value_too_long_names_its_entry(
    tmp_path: Path, warm: Warm, table: str, column: str, what: str
) -> None:
    path, key = _hostile(tmp_path, table, column)
    named = f"corrupt {what} entry '{key}' ({column}: {len(TOO_LONG)} bytes"
    with Bundle.open(path) as bundle, pytest.raises(BundleError) as raised:
        list(bundle.each_tune() if what == "tune" else bundle.each_kernel())
    assert named in str(raised.value)
    summed = [("stats",)] if what == "tune" else []  # a summary reads no kernel's label
    for command in [("stats", "--json"), *summed]:
        run = warm(*command, path)
        assert run.returncode == 2, run.stderr
        assert named in run.stderr and "too big" not in run.stderr
    # verify names it among its problems (exit 1), as any malformed row (`test_clean37`),
    # but a value in an index (operation): SQLite's own check refuses it (exit 2)
    run = warm("verify", path)
    assert run.returncode == (2 if column == "operation" else 1), run.stdout + run.stderr
    assert named in run.stdout + run.stderr and "too big" not in run.stdout + run.stderr


@pytest.mark.parametrize("column", ["shape_key", "operation"])
def test_a_value_too_long_names_its_entry_read_by_several_processes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, column: str
) -> None:
    path, key = _hostile(tmp_path, "tunes", column)
    monkeypatch.setattr(listing, "PARALLEL_TUNES", 1)
    monkeypatch.setattr(listing, "RANGE_TUNES", 2)
    monkeypatch.setattr(listing, "worker_count", lambda: 2)
    with Bundle.open(path) as bundle, pytest.raises(BundleError) as raised:
        texts = listing.converted_tunes(bundle, tune_lines)
        assert texts is not None
        list(texts)
    assert f"corrupt tune entry '{key}' ({column}: {len(TOO_LONG)} bytes" in str(raised.value)
