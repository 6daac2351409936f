"""Found at stop 49's merges: `warm stats --json` of a 5,000-kernel bundle under `ulimit -v
52` MB (50 after a change to how stats reads tunes) died of SIGSEGV, not one line.

Out of memory past a command's guard is said by `cli.common.exit_code`, which called itself
to say it from inside its `except MemoryError`: there the exception's traceback still held the
frames holding what ran out, so saying it ran out again, and the next level again, until the
C stack overflowed. Now it is said after the handler (the frames let go), and where even that
runs out, as bytes made beforehand. The real CLI under real limits around where it happened
is `test_speed43b`'s (52 and 50 MB among its limits now); here a unit test of the control
flow alone (`fail` stood in for by one that runs out too).
"""

from __future__ import annotations

import pytest

from warmcli.cli import common


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
