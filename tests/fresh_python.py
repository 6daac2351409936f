"""Fresh interpreters for the tests of how a process starts, stops and ends (signals, forks,
exit codes), started as a user starts them: `warm` (`fresh_warm`, in the test's folder, with
a home of its own there) or a `python -c` script (`fresh_code`, in the checkout), each with
the environment's `WARM_*` settings dropped and this checkout importable (`fresh_env`); or a
script in the checkout under an environment of the test's, read as the JSON it prints
(`printed_json`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def fresh_env(tmp: Path | None = None) -> dict[str, str]:
    """This process's environment less `WARM_*`, the checkout on PYTHONPATH, and (given
    `tmp`) `WARM_HOME` in `tmp`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
    env["PYTHONPATH"] = str(ROOT)
    if tmp is not None:
        env["WARM_HOME"] = str(tmp / "home")
    return env


def fresh_warm(tmp: Path, *args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """`python -m warmcli ARGS` in `tmp`, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "warmcli", *args],
        env=fresh_env(tmp),
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def fresh_code(code: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`python -c CODE ARGS` in the checkout, its output captured."""
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        env=fresh_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def printed_json(code: str, env: dict[str, str], timeout: float = 120) -> object:
    """The JSON `python -c CODE` prints, run in the checkout under `env` (it must succeed)."""
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
    ).stdout
    return json.loads(out)
