"""`warm stats --json BUNDLE` (or any command: `warm_under`) run under an address-space limit
(`RLIMIT_AS`): a real CLI process, the limit set in the child before it starts; and the check
its end is as warm promises: exit 0, or exit 2 and one line saying it ran out of memory (under
`--json` its document on stdout too; never a traceback, never a signal, never a sound bundle
called corrupt). For the tests of running out of memory (`test_speed43b`, `test_faults34`,
`test_main49`, `test_review50a`).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, Warm


def stats_json_under(warm: Warm, bundle: Path, megabytes: int) -> subprocess.CompletedProcess[str]:
    """`warm stats --json bundle` in a process limited to `megabytes` of address space."""
    return warm_under(warm, megabytes, "stats", "--json", bundle)


def warm_under(warm: Warm, megabytes: int, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """`warm ARGS` in a process limited to `megabytes` of address space."""

    def little() -> None:
        size = megabytes << 20
        resource.setrlimit(resource.RLIMIT_AS, (size, size))

    return subprocess.run(
        [sys.executable, "-m", "warmcli", *args],
        capture_output=True, text=True, env=warm.env, cwd=ROOT, preexec_fn=little, timeout=120,
    )  # fmt: skip


def ended_as_promised(proc: subprocess.CompletedProcess[str], megabytes: int) -> int:
    """Assert `proc` ended as warm promises under a memory limit; its exit code."""
    said = (megabytes, proc.returncode, proc.stderr[-600:], proc.stdout[-300:])
    assert "Traceback" not in proc.stderr and "corrupt" not in proc.stderr, said
    assert proc.returncode in (0, 2), said  # (never a signal: -11 was a stack overflow)
    if proc.returncode:
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and "out of memory" in lines[0], said
        if "--json" in proc.args:  # (README: a failure's document on stdout too)
            assert json.loads(proc.stdout)["exit"] == 2, said
    return proc.returncode
