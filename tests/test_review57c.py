"""Review 57c: what a compiler run in a scratch folder reads, told one way (review57c).

`warmcli.scratch.seen_from_scratch` (the folder a compiler in a new scratch folder finds
programs in, for a relative `PATH` entry) and `climbs` (whether a relative name read there
leaves it; `warmcli.backends.scratch_reads`' then) each told whether a relative path climbs out
of the scratch folder: the first by `os.path.normpath`, which takes `a/../../bin` for `../bin`,
though the system resolves each part in turn and a new scratch folder holds no `a` (nothing is
found there). Both now ask `climbs`. Checked against the real file system: a program in the
temporary folder's `bin`, looked for from a real scratch folder as a compiler's `execvp` does.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from warmcli.scratch import climbs, scratch_folder, seen_from_scratch


@pytest.mark.parametrize("entry", ["a/../../bin", "../bin", "./../bin", "bin", "."])
def test_seen_from_scratch_is_where_a_compiler_there_finds_programs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str
) -> None:
    """A `PATH` entry `a/../../bin` finds nothing from a new scratch folder (no `a` in it):
    before, `seen_from_scratch` named the temporary folder's `bin` for it (normpath's
    `../bin`), so an identity was looked for in a folder the compiler never searched; now
    None, as for `bin`. `../bin` and `./../bin` still name it, as the system finds them."""
    (tmp_path / "bin").mkdir()
    tool = tmp_path / "bin" / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with scratch_folder("warm-review57c-") as scratch:
        found = shutil.which("tool", path=os.path.join(scratch, entry))
    seen = seen_from_scratch(entry)
    told = seen is not None and shutil.which("tool", path=seen) is not None
    assert told == (found is not None), (entry, seen, found)
    assert (seen is not None) == climbs(entry)
