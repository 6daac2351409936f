"""Stop 53's leftovers, mended: nvcc's `nvcc.profile` was remembered per process by its inode,
size and mtime only, so a profile edited in place to one of the same size with its mtime set
back (`touch -r`, as `cp -p` or a restore leaves one) kept the digest of the profile before it:
its kernels keyed as the old profile's builds. Now by its whole stamp (the ctime too, which no
one sets back), and only once settled; the memo keeps the last 8. And `warm --help > /dev/full`
said `warm: error: [Errno 28] No space left on device`, where a command's refused output says
`output not written whole: ...` (trial53c's leftover: Click writes help itself). And warm's SQL
numbered its placeholders (`?1`), which Python 3.12.1's sqlite3 warns of on every statement
(CPython's gh-117995): a user's suite run with warnings as errors failed inside warm there
(py313b's leftover); none is numbered now. Real files, no nvcc run; the real CLI started."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from warmcli import stamped
from warmcli.backends.cuda import profile


def test_a_profile_edited_to_the_same_size_and_mtime_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stamped, "SETTLED_NS", 0)  # (2 s in use: every stamp settled here)
    binary = tmp_path / "bin" / "nvcc"
    binary.parent.mkdir()
    held = binary.parent / "nvcc.profile"
    held.write_text("INCLUDES += -DN=3\n")
    before = profile.digest(str(binary))
    mtime = held.stat().st_mtime_ns
    time.sleep(0.05)  # a tick of the clock a ctime takes
    with open(held, "r+") as fh:  # in place: the same inode and size
        fh.write("INCLUDES += -DN=4\n")
    os.utime(held, ns=(mtime, mtime))  # its mtime set back, as `touch -r` does
    assert profile.digest(str(binary)) != before


def test_help_into_a_full_disk_is_named_as_the_outputs() -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        done = subprocess.run(
            [sys.executable, "-m", "warmcli", "--help"], stdout=full, stderr=subprocess.PIPE
        )
    assert done.returncode == 2, done.stderr
    assert done.stderr.decode() == (
        "warm: error: output not written whole: [Errno 28] No space left on device\n"
    )


def test_no_sql_placeholder_is_numbered() -> None:
    numbered = re.compile(r"(?<![-\w\\])\?\d")  # `?1`, never a regex's `-?0x`
    sources = Path(profile.__file__).parents[2].glob("**/*.py")
    found = [f"{p.name}: {m.group()}" for p in sources for m in numbered.finditer(p.read_text())]
    assert found == []
