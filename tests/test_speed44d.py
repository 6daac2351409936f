"""speed44d: `Warm.with_env` and `ForkedWarm.with_env`, what the modules that set one
variable for a few commands now use instead of wrapping a forked warm in a fresh `Warm`
(each of whose commands started an interpreter): the same warm with the variables over its
environment, a forked one still forked, neither changing the warm it came from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conftest import Warm
from forked_cli import ForkedWarm


def test_with_env_stays_forked_and_each_command_sees_its_variables(
    warm: Warm, forking_servers: Any, tmp_path: Path
) -> None:
    forked = ForkedWarm(warm, forking_servers)
    home = tmp_path / "other-home"
    other = forked.with_env(WARM_HOME=str(home))
    assert isinstance(other, ForkedWarm) and other.env["WARM_HOME"] == str(home)
    assert forked.env["WARM_HOME"] == warm.env["WARM_HOME"] != str(home)  # left as it was
    for proc in (other("stats"), warm.with_env(WARM_HOME=str(home))("stats")):
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"{home}/bundle.warm: no such bundle" in proc.stderr  # the default bundle there
    mine = forked("stats")
    assert mine.returncode == 2 and f"{warm.env['WARM_HOME']}/bundle.warm" in mine.stderr
    plain = warm.with_env(COLUMNS="50")
    assert type(plain) is Warm and plain.env["COLUMNS"] == "50" and warm.env["COLUMNS"] == "200"
