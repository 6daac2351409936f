"""Leftovers of stop 41 (leftovers42a): a write-back's one write of what it built, errors
of one line, a deeply nested tune key, and a process started during a long commit."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from conftest import Warm

from bench import generated
from warmcli import Bundle, ProcessMode, ProcessModeOverride, Runtime
from warmcli.backends.host import HostDevice
from warmcli.warming.workload import load_workload


def test_a_write_back_writes_what_it_built_once_at_the_time_of_what_it_served(
    warm: Warm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "b.warm"
    proc = warm("run", "-q", "--bundle", path, generated.write(tmp_path / "two.py", 2))
    assert proc.returncode == 0, proc.stderr
    monkeypatch.setenv("WARM_HOME", warm.env["WARM_HOME"])
    with Bundle.open(path, write=True) as bundle:
        rt = Runtime(HostDevice(), bundle)  # serves two, builds two
        with ProcessModeOverride(ProcessMode.EXECUTE):
            load_workload(generated.write(tmp_path / "four.py", 4)).function(rt)
        statements: list[str] = []
        bundle._conn.set_trace_callback(statements.append)  # SQLite's own record of its work
        assert rt.persist(bundle) == (2, 0)
        bundle._conn.set_trace_callback(None)
        rt.close()
    touched = [s for s in statements if s.startswith("UPDATE kernels SET last_used")]
    assert len(touched) == 2, touched  # the served ones only: the built are stored once
    with sqlite3.connect(path) as conn:
        times = conn.execute("SELECT count(DISTINCT last_used), count(*) FROM kernels")
        assert times.fetchone() == (1, 4)
