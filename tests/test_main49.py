"""Found at stop 49's merges: `warm stats --json` of a 5,000-kernel bundle under `ulimit -v
52` MB (50 after a change to how stats reads tunes) died of SIGSEGV, not one line.

Out of memory past a command's guard is said by `cli.common.exit_code`, which called itself
to say it from inside its `except MemoryError`: there the exception's traceback still held the
frames holding what ran out, so saying it ran out again, and the next level again, until the
C stack overflowed. Now it is said after the handler (the frames let go), and where even that
runs out, as bytes made beforehand. The first test is the real CLI under a real limit; the
second a unit test of the control flow alone (`fail` stood in for by one that runs out too).
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest
from big_bundle import build_big
from conftest import ROOT, Warm

from warmcli.cli import common


def test_stats_json_out_of_memory_is_one_line_at_every_limit_never_a_signal(
    warm: Warm, tmp_path: Path
) -> None:
    big = build_big(tmp_path / "big.warm", 5000, 5000)
    for megabytes in range(46, 58, 2):  # (around where reading runs out)

        def little() -> None:
            size = megabytes << 20  # noqa: B023
            resource.setrlimit(resource.RLIMIT_AS, (size, size))

        proc = subprocess.run(
            [sys.executable, "-m", "warmcli", "stats", "--json", big],
            capture_output=True, text=True, env=warm.env, cwd=ROOT, preexec_fn=little,
            timeout=120,
        )  # fmt: skip
        assert proc.returncode in (0, 2), (megabytes, proc.returncode, proc.stderr[-600:])
        if proc.returncode:
            assert proc.stderr.splitlines() == [f"warm: error: {common.OUT_OF_MEMORY}"], (
                megabytes,
                proc.stderr[-600:],
            )


def test_out_of_memory_while_saying_so_is_said_as_bytes_once(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    said = []

    def fail_running_out(message: str) -> None:  # (a stand-in: `fail` out of memory too)
        said.append(message)
        raise MemoryError

    def action() -> int:
        raise MemoryError

    monkeypatch.setattr(common, "fail", fail_running_out)
    assert common.exit_code(action) == 2
    assert said == [common.OUT_OF_MEMORY]
    assert capfd.readouterr().err == f"warm: error: {common.OUT_OF_MEMORY}\n"
