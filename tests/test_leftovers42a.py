"""Leftovers of stop 41 (leftovers42a): a write-back's one write of what it built, errors
of one line, a deeply nested tune key, and a process started during a long commit."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Warm

from bench import generated
from warmcli import Bundle, Kernel, ProcessMode, ProcessModeOverride, Runtime, Tunable
from warmcli.backends.host import HostDevice
from warmcli.errors import TuneSpecError
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


RAISES = """
DEVICE = "host"
def workload(rt):
    raise ValueError("first\\nsecond\\x1b[2J")
"""
DEEP = """
from warmcli import Kernel, Tunable
DEVICE = "host"
SRC = "void touch(int *p, int n) { if (n < 0) p[0] = V; }"
def launch(rt, k, b, n, *, stream=None):
    rt.launch(k, b, n, stream=stream)
KEY = 1
for _ in range(5000):
    KEY = [KEY]
T = Tunable("deep", {f"v{i}": Kernel(SRC, "touch", "Pi", defines={"V": i}) for i in (1, 2)},
            launch, key=lambda b, n: KEY)
def workload(rt):
    rt.tune(T, rt.buffer(4, "int32"), 1)
"""


@pytest.mark.parametrize(
    ("source", "said"),
    [
        (RAISES, "ValueError: first\\x0asecond\\x1b[2J"),
        (DEEP, "TuneSpecError: tunable deep: key= gave a value nested too deeply"),
    ],
)
def test_warm_run_says_a_workloads_error_on_one_line(
    forked: Callable[[Warm], Any], warm: Warm, tmp_path: Path, source: str, said: str
) -> None:
    workload = tmp_path / "w.py"
    workload.write_text(source)
    proc = forked(warm)("run", "--bundle", tmp_path / "b.warm", workload)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "\x1b" not in proc.stderr, proc.stderr
    assert said in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_a_deeply_nested_key_is_a_tune_spec_error_naming_the_tunable() -> None:
    key: Any = 1
    for _ in range(5000):
        key = (key,)
    source = "void touch(int *p, int n) { if (n < 0) p[0] = V; }"
    kernels = {f"v{i}": Kernel(source, "touch", "Pi", defines={"V": i}) for i in (1, 2)}
    tunable = Tunable("deep", kernels, lambda rt, k, b, n: None, key=lambda b, n: key)
    rt = Runtime(HostDevice())
    try:
        with pytest.raises(TuneSpecError, match=r"^tunable deep: key= gave a value nested"):
            rt.tune(tunable, rt.buffer(4, "int32"), 1)
        keyed_by_inputs = Tunable("deep", kernels, lambda rt, k, b, n: None)
        with pytest.raises(TypeError, match=r"^tunable deep: input 2 is nested too deeply"):
            rt.tune(keyed_by_inputs, rt.buffer(4, "int32"), key)
    finally:
        rt.close()
