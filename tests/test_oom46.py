"""Out of memory at an address-space limit's edge (stop 46's CI).

`warm stats --json` of a large bundle under `ulimit -v` at the limit's edge (55 MB here, 52 MB
before `warm stats` stopped importing numpy) ended, about 1 run in 5, in CPython's fatal dump
("object address ... SystemError('error return without exception set') ... lost sys.stderr",
exit 1) or a RecursionError the same way: CPython's C code, an allocation failed, raised those
instead of MemoryError, and `warmcli.__main__` answered MemoryError alone. Now either is one
line, exit 2, where an address-space limit is set, and left as it is where none is. The edge
itself cannot be hit every run, so these tests raise the error from a stand-in command (a fake,
named so) through the real `python -m warmcli` entry point.
"""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

FAKE_COMMAND = """
import resource, runpy, sys
limit = int(sys.argv[1])
if limit:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import warmcli.cli
def fake_main():  # a stand-in for a command that ran out of memory in CPython's C code
    raise {error}("error return without exception set")
warmcli.cli.main = fake_main
sys.argv = ["warm", "stats", "x.warm"]
runpy.run_module("warmcli", run_name="__main__")
"""


def _run(error: str, limit: int) -> subprocess.CompletedProcess[str]:
    code = FAKE_COMMAND.format(error=error)
    return subprocess.run(
        [sys.executable, "-c", code, str(limit)], capture_output=True, text=True, cwd=ROOT,
        timeout=60,
    )  # fmt: skip


def test_a_system_or_recursion_error_under_a_memory_limit_is_one_line() -> None:
    for error in ("SystemError", "RecursionError"):
        done = _run(error, 16 << 30)  # a limit far above what the process uses
        assert done.returncode == 2, (error, done.stderr)
        assert done.stderr.strip().splitlines() == [
            "warm: error: out of memory (a memory limit: ulimit -v, a container's?)"
        ], done.stderr


def test_without_a_limit_such_an_error_is_not_called_out_of_memory() -> None:
    done = _run("SystemError", 0)
    assert done.returncode != 0
    assert "out of memory" not in done.stderr and "SystemError" in done.stderr
