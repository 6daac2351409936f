"""Review of stop 43's process and signal code (child_signals, stop_signals, forked_launches,
pool_tasks, the exit path's `_EndsAs`): a stop signal's handler whose `SystemExit` code is no
int but equals 0 (`sys.exit(0.0)`, numpy's `int64(0)`) cut a write-back short and ended the
process 0, its text printed, where Python ends one so with 1; one whose code's `==` raised
printed a traceback from warm's exit handler and ended 0. Real processes in subprocesses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _env(tmp: Path) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    return dict(base, PYTHONPATH=str(ROOT), WARM_HOME=str(tmp / "home"))


def _python(tmp: Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code],
        env=_env(tmp),
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=60,
    )


# A code Python ends with 1, printing it: a float, numpy's int, an object whose `==` raises.
ODD = (
    'type("Odd", (), {"__eq__": lambda s, o: 1 / 0, "__hash__": lambda s: 1,'
    ' "__str__": lambda s: "odd"})()'
)


@pytest.mark.parametrize("code", ["0.0", "__import__('numpy').int64(0)", ODD, "3", "None", "0"])
def test_a_stops_code_ends_the_write_back_as_python_ends_it_in_the_main_code(
    tmp_path: Path, code: str
) -> None:
    """warm's exit handler's end (`end_as_stopped`, as `production._at_exit` calls it, its
    text printed first) against the same `SystemExit` raised by the main code."""
    plain = _python(tmp_path, f"import sys\nraise SystemExit({code})")
    ends = (
        "from warmcli.interrupted import end_as_stopped\n"
        f"stop = SystemExit({code})\n"
        "if not isinstance(stop.code, int | None):\n"
        "    print(stop.code, file=__import__('sys').stderr)\n"
        "end_as_stopped(stop)\n"
    )
    warm = _python(tmp_path, ends)
    assert (warm.returncode, warm.stderr) == (plain.returncode, plain.stderr)  # 0.0: was 0
