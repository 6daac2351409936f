"""A hostile review of stop 50's product changes: what it found, each fixed.

A probe's answer cut: `processes.run` now keeps a child's first 32 kB and last 8 kB, which
is right for a compiler's log but not for the probes whose output warm parses. Under a long
`COMPILER_PATH` (2,000 folders: a 230 kB `programs` line) `cc -print-search-dirs`' line was
left out and its program folders read as none, the answer a compiler gives that names none,
remembered so; `cc -E -v`'s search list, past 32 kB, would be read as none or half of it.
Probes (`processes.probe`: those two, nvcc's `--list-gpu-code` and `--dryrun`) keep their
output whole up to 4 MiB, and fail as where they cannot start beyond it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from warmcli.backends import processes
from warmcli.backends.host import programs
from warmcli.backends.kept_output import PROBE_BYTES, TAIL_BYTES


def test_a_programs_line_past_the_kept_head_is_read_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    folders = [f"/nonexistent/review50c/folder{i:05d}" for i in range(2000)]
    monkeypatch.setenv("COMPILER_PATH", os.pathsep.join(folders))
    line = programs._read_folders("", "cc")  # the real cc's real answer
    assert len(line) > 200_000
    listed = line.split(os.pathsep)
    assert listed[0].startswith(folders[0] + "/") and any(f.startswith(folders[-1]) for f in listed)


def test_a_probe_printing_past_its_bound_fails_as_one_that_cannot_start(tmp_path: Path) -> None:
    loud = f"import sys; sys.stdout.write('x' * {PROBE_BYTES + TAIL_BYTES + 1})"
    with pytest.raises(OSError, match="printed more than 4 MiB"):
        processes.probe(["python3", "-c", loud], 60)
    whole = processes.probe(["python3", "-c", f"print('y' * {PROBE_BYTES - 100})"], 60)
    assert not whole.cut and len(whole.out) == PROBE_BYTES - 99
