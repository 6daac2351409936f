"""What suite48 found timing the suite: `toolchains.json` read, then rewritten, by processes at
once. Each process keeping a version line (`toolchain._remember`) read the file, added its line
and wrote the whole back: two at once each wrote what it had read, so one's line was lost (6
processes of 5 lines each: 7 to 10 of the 30 kept). A `warm run` with nvcc keeps its lines
from processes at once: `test_hostile47`'s nvcc test found its `cc -E -v includes -x c++` line
missing about once in 20 runs, and a line lost is a compiler asked again by the next process.
Real processes (forks), a real home and file.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

PROCESSES, LINES = 6, 5  # (30 lines: under MAX_REMEMBERED, so none is dropped by age)


def _keep(home: str, i: int, start: multiprocessing.synchronize.Event) -> None:
    os.environ["WARM_HOME"] = home
    from warmcli.backends import toolchain

    start.wait(30)
    for j in range(LINES):
        toolchain._remember(f"suite48-{i}-{j}", f"cc (suite48) {i}.{j}")


@pytest.mark.parametrize("attempt", range(3))
def test_lines_kept_by_processes_at_once_are_all_kept(tmp_path: Path, attempt: int) -> None:
    from warmcli.backends.toolchain import MAX_REMEMBERED, VERSIONS_FILE

    assert PROCESSES * LINES <= MAX_REMEMBERED
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    fork = multiprocessing.get_context("fork")
    start = fork.Event()
    processes = [fork.Process(target=_keep, args=(str(home), i, start)) for i in range(PROCESSES)]
    for process in processes:
        process.start()
    start.set()
    for process in processes:
        process.join(60)
        assert process.exitcode == 0
    kept = json.loads((home / VERSIONS_FILE).read_text())
    wanted = {f"suite48-{i}-{j}" for i in range(PROCESSES) for j in range(LINES)}
    assert wanted <= set(kept), f"{len(wanted - set(kept))} of {len(wanted)} lines lost"


def test_a_home_another_process_holds_costs_a_bounded_wait_and_the_line_is_kept(
    tmp_path: Path,
) -> None:
    """Another user who may read the home can lock it (`flock` needs only a descriptor): a
    process keeping its line waits `HELD_SECONDS` at most, then writes it as before."""
    import fcntl
    import subprocess
    import sys
    import time

    from warmcli.backends.toolchain import VERSIONS_FILE
    from warmcli.home import HELD_SECONDS

    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    code = "from warmcli.backends import toolchain; toolchain._remember('held', 'cc (held) 1')"
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-c", code], env=dict(os.environ, WARM_HOME=str(home)), timeout=120
        )
        took = time.monotonic() - started
    finally:
        os.close(fd)
    assert done.returncode == 0
    assert HELD_SECONDS <= took < HELD_SECONDS + 60, took
    assert json.loads((home / VERSIONS_FILE).read_text()) == {"held": "cc (held) 1"}
