"""`warm stats` read every tune's candidates twice (stats49): once to name each kernel it
lists by the candidates that are it, once more to show each tune (`--explain`: a third
time, for the kernels its operation's candidates name). 6 tunes of 40,000 candidates:
480,000 candidates unpacked for 240,000. A bundle small enough to list is read once now
(`warmcli.ops.stats.read_once`), and again only where a malformed row was skipped, to name
it as before. The real CLI in this process (so its reads are counted: the real unpacker,
each call counted and passed on), on real SQLite files (the host example's bundle from
`warm run`, tunes added with sqlite3, packed as warm packs them)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from test_hostile46 import _tunes_of_many_candidates
from tune_rows import add_other_tunes
from typer.testing import CliRunner

ARGS = ((), ("--json",), ("--explain", "matmul"), ("--json", "--explain", "matmul"))


def _stats(monkeypatch: pytest.MonkeyPatch, *args: object) -> tuple[int, int, str]:
    """(exit code, tune documents unpacked, output) of `warm stats ARGS` run in this process."""
    import warmcli.bundle.tune_row as tune_row
    from warmcli.cli.app import app

    real, unpacked = tune_row.unpack, [0]

    def counted(*given: object, **named: object) -> object:
        unpacked[0] += 1
        return real(*given, **named)  # type: ignore[arg-type]

    monkeypatch.setattr(tune_row, "unpack", counted)
    shown = CliRunner().invoke(app, ["stats", *map(str, args)])
    monkeypatch.setattr(tune_row, "unpack", real)
    return shown.exit_code, unpacked[0], shown.output


def _bundle(host_bundle: Callable[[Path], Path], tmp_path: Path) -> Path:
    """The host example's bundle (3 tunes of matmul) with 4 more tunes of matmul, each of 500
    candidates, and 3 of another operation: 10 tune rows, each a packed document."""
    good = host_bundle(tmp_path / "good.warm")
    path = _tunes_of_many_candidates(good, tmp_path / "many.warm", tunes=4, candidates=500)
    add_other_tunes(path, 3)
    return path


def test_stats_unpacks_each_tune_once(
    host_bundle: Callable[[Path], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _bundle(host_bundle, tmp_path)
    for args in ARGS:
        code, unpacked, output = _stats(monkeypatch, path, *args)
        assert code == 0, output[-2000:]
        assert unpacked == 10, f"warm stats {' '.join(args)}: {unpacked} unpacked for 10 rows"


def test_a_malformed_row_is_still_named_or_skipped_as_it_was(
    host_bundle: Callable[[Path], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row of another operation, malformed, is skipped explaining `matmul` (its rows read
    again, to tell), and named by a listing of every tune and by `--explain other`."""
    path = _bundle(host_bundle, tmp_path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("UPDATE tunes SET candidates = x'01ff' WHERE shape_key = 's1'")
    conn.close()
    for args in ARGS:
        code, unpacked, output = _stats(monkeypatch, path, *args)
        if "matmul" in args:
            assert code == 0, output[-2000:]
            assert unpacked == 10 + 7, f"{args}: {unpacked}"  # (matmul's 7 again)
            assert "s1" not in output
        else:
            assert code != 0 and "corrupt tune entry" in output, output[-2000:]
            assert "Traceback" not in output
    code, _, output = _stats(monkeypatch, path, "--explain", "other")
    assert code != 0 and "corrupt tune entry" in output and "candidates:" in output, output
