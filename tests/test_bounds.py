"""Memory stays bounded on a large bundle: every reading command of the real CLI, on a
bundle of `ROWS` kernels and `ROWS` tunes, peaks within `GROWTH` MiB of the same command
on a bundle of ten (rows stream a batch at a time; listings keep their first entries and
count the rest; no command reads a whole table). Before, the peaks grew with the rows:
on 200,000 of each, `stats --json` took 3.2 GB, `diff` 1.9 GB, `stats --explain` 1.5 GB,
`clean --dry-run` 1.1 GB, `check` 0.9 GB. The 1,000,000-row figures are a slow trial
(`make stress`), which prints them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from big_bundle import build_big, peak_rss
from conftest import ROOT

# Over `warmcli.cli.inspect.NAMED_TUNES` and `warmcli.bundle.checking.PARALLEL_TUNES`
# (20,000 each), at or under which `stats --json` reads a bundle whole by design (157 MiB on
# 20,000) and the tunes are read in one process; the old growths were 0.9 GB (check, the
# least) and more on 200,000, over 4.5 KiB a row: over 90 MiB here, three times `GROWTH`.
ROWS = 21_000
GROWTH = 32  # MiB over the same command on a bundle of ten
COMMANDS = {
    "stats": ["stats", "{big}"],
    "stats --json": ["stats", "{big}", "--json"],
    "stats --explain": ["stats", "{big}", "--explain", "op3"],
    "verify": ["verify", "{big}"],
    "check": ["check", "{big}"],
    "clean --dry-run": ["clean", "{big}", "--dry-run"],
    "diff": ["diff", "{big}", "{other}"],
}


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    return {**env, "WARM_HOME": str(home), "COLUMNS": "200", "PYTHONPATH": str(ROOT)}


def run(command: str, big: Path, other: Path, env: dict[str, str]) -> tuple[object, float]:
    args = [a.format(big=big, other=other) for a in COMMANDS[command]]
    return peak_rss([sys.executable, "-m", "warmcli", *args], env)


@pytest.fixture(scope="module")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("bounds")
    return {
        "big": build_big(tmp / "big.warm", ROWS, ROWS),
        "half": build_big(tmp / "half.warm", ROWS // 2, ROWS // 2),
        "tiny": build_big(tmp / "tiny.warm", 10, 10),
        "tiny2": build_big(tmp / "tiny2.warm", 5, 5),
    }


@pytest.mark.parametrize("command", COMMANDS)
def test_a_command_on_a_large_bundle_peaks_as_on_a_small_one(
    command: str, bundles: dict[str, Path], tmp_path: Path
) -> None:
    env = _env(tmp_path / "home")
    # The small run first: a compiler probed once (NVRTC's library loaded to read its
    # version) is remembered in WARM_HOME, so both runs then find it the same way.
    _, small = run(command, bundles["tiny"], bundles["tiny2"], env)
    proc, peak = run(command, bundles["big"], bundles["half"], env)
    assert proc.returncode in (0, 1), proc.stderr  # check: cuda kernels, no GPU here
    assert "Traceback" not in proc.stderr and proc.stdout
    assert peak - small < GROWTH, f"{command}: {peak:.0f} MiB, on ten rows {small:.0f} MiB"
    if command == "stats --json":  # everything, streamed
        doc = json.loads(proc.stdout)
        assert len(doc["kernels"]) == ROWS and len(doc["tunes"]) == ROWS
    if command == "diff":  # the first 1,000 listed, every one counted
        assert f"kernels only in A: {ROWS - ROWS // 2:,} in all" in proc.stdout


@pytest.mark.slow
def test_a_million_kernels_and_a_million_tunes(tmp_path: Path) -> None:
    """The issue's bundle: 1,000,000 kernels and 1,000,000 tunes; prints each command's
    time and peak memory, each under a few hundred MB."""
    started = time.perf_counter()
    big = build_big(tmp_path / "big.warm", 1_000_000, 1_000_000)
    other = build_big(tmp_path / "other.warm", 500_000, 500_000)
    size = big.stat().st_size / 2**30
    print(f"\nbuilt {size:.1f} GiB bundle in {time.perf_counter() - started:.0f} s")
    env = _env(tmp_path / "home")
    for command in COMMANDS:
        started = time.perf_counter()
        proc, peak = run(command, big, other, env)
        took = time.perf_counter() - started
        print(f"{command:16} exit {proc.returncode}  {took:6.1f} s  {peak:6.0f} MiB")
        assert proc.returncode in (0, 1), proc.stderr
        assert peak < 400, command
