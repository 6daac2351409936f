"""The forking servers of `tests/forked_cli.py` (each `warm` command of a module that imports
`forked_warm` a fork of one) stay few: one per environment apart from `WARM_*` was started and
kept to the session's end, so a module whose tests each set a variable of their own (a path
in `tmp_path`: test_launch35, test_cuda_unkeyed_inputs) left a ~40 MB process a test, 42 of
them after three modules. Real servers, real forks of the real CLI."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from conftest import ROOT, Warm
from forked_cli import ForkedWarm, Servers


def test_servers_of_many_environments_stay_few_and_each_still_serves(tmp_path: Path) -> None:
    servers = Servers(ROOT)
    # Kept: 2, not the class's 6 (`Servers.server` evicts past `self.KEPT` alike): 5 servers
    # started (~0.4 s of CPU each), not 9.
    servers.KEPT = 2
    started: list[Any] = []
    try:
        base = {k: v for k, v in os.environ.items() if not k.startswith("WARM_")}
        for i in range(servers.KEPT + 2):  # two past the kept: each evicted in turn
            warm = ForkedWarm(Warm(dict(base, SPEED42=str(i), WARM_HOME=str(tmp_path))), servers)
            done = warm("--version")
            assert done.returncode == 0 and done.stdout.strip(), done.stderr
            started.append(servers.server(warm.env))
        alive = [s for s in started if s.poll() is None]
        assert len(alive) == servers.KEPT, [s.poll() for s in started]
        assert alive == started[-servers.KEPT :]  # the ones used last are kept
        again = ForkedWarm(Warm(dict(base, SPEED42="0", WARM_HOME=str(tmp_path))), servers)
        assert again("--version").returncode == 0  # an ended one's environment: started anew
    finally:
        servers.close()
    assert all(s.poll() is not None for s in started)
